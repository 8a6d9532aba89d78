"use strict";
// The web console. Everything the server sends is put in the page as text (textContent),
// never as markup.
const API = "/ap/v1/agent/tasks";
const PLUGINS = "/ap/v1/plugins";
const $ = (id) => document.getElementById(id);
const tokenField = $("token");
tokenField.value = localStorage.getItem("autogpt-token") || "";
tokenField.addEventListener("change", () => {
  localStorage.setItem("autogpt-token", tokenField.value.trim());
  showView();
  if (current) choose(current);
  if (currentPlugin) choosePlugin(currentPlugin);
});
let current = null;
let streamAbort = null;
let currentPlugin = null;

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const token = tokenField.value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

class HttpError extends Error {
  constructor(status, message) { super(status + ": " + message); this.status = status; this.text = message; }
}

async function call(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) {
    let message = response.statusText || "error";
    try { message = (await response.json()).message; } catch (e) {}
    throw new HttpError(response.status, message);
  }
  return response;
}

// Requests that make the server look for new artifacts (task lists, a task, its artifacts)
// go one after another: the server records a file it finds as an artifact, and two looks
// at once could both record it.
let queue = Promise.resolve();
function serial(fn) {
  const run = queue.then(fn, fn);
  queue = run.catch(() => {});
  return run;
}

function say(text) { $("status").textContent = text || ""; }

function element(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function item(text, cls) { return element("li", text, cls); }

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

// -- views ---------------------------------------------------------------------------

function showView() {
  const plugins = location.hash === "#plugins";
  $("tasks-nav").hidden = plugins;
  $("tasks-view").hidden = plugins;
  $("plugins-nav").hidden = !plugins;
  $("plugins-view").hidden = !plugins;
  $("tab-tasks").classList.toggle("active", !plugins);
  $("tab-plugins").classList.toggle("active", plugins);
  say("");
  if (plugins) refreshPlugins(); else refresh();
}
window.addEventListener("hashchange", showView);

// -- tasks ---------------------------------------------------------------------------

function noToken() {
  if (tokenField.value.trim()) return false;
  say("Paste a token first (autogpt serve printed where its tokens are).");
  return true;
}

async function refresh() {
  if (noToken()) return;
  try {
    const data = await serial(async () => (await call("GET", API + "?page_size=100")).json());
    const list = $("tasks");
    list.replaceChildren();
    for (const task of data.tasks) {
      const li = item(task.status + " \u2014 " + task.input, "task");
      li.dataset.taskId = task.task_id;
      if (current === task.task_id) li.classList.add("active");
      li.addEventListener("click", () => choose(task.task_id));
      list.appendChild(li);
    }
    say("");
  } catch (error) { say(error.message); }
}

$("new-task").addEventListener("submit", async (e) => {
  e.preventDefault();
  const goal = $("goal").value.trim();
  if (!goal) { say("Write what the agent should do first."); return; }
  try {
    const task = await serial(async () => (await call("POST", API, {
      input: goal, additional_input: { autonomous: $("autonomous").checked } })).json());
    $("goal").value = "";
    await refresh();
    choose(task.task_id);
  } catch (error) { say(error.message); }
});

async function choose(taskId) {
  current = taskId;
  if (streamAbort) streamAbort.abort();
  streamAbort = null;
  $("events").replaceChildren();
  $("pending").replaceChildren();
  $("artifacts").replaceChildren();
  try {
    const task = await serial(async () => (await call("GET", API + "/" + taskId)).json());
    if (current !== taskId) return;
    $("task-title").textContent = task.input;
    $("task-status").textContent = "Status: " + task.status;
  } catch (error) { say(error.message); return; }
  refresh();
  showArtifacts();
  watch(taskId);
}

function showPending(pending) {
  const box = $("pending");
  box.replaceChildren();
  if (!pending) return;
  const div = element("div", null, "pending");
  const text = element("p");
  if (pending.kind === "confirmation") {
    text.textContent = "Allow " + pending.command + " (" + pending.plugin + ", needs " +
      pending.missing_permissions.join(", ") + ")? Arguments: " + JSON.stringify(pending.arguments);
  } else {
    text.textContent = "The agent asks: " + pending.question;
  }
  div.appendChild(text);
  const taskId = current;
  const answer = async (decision) => {
    try {
      await call("POST", API + "/" + taskId + "/confirmations/" + pending.id,
                 pending.kind === "confirmation" ? { decision } : { answer: decision });
      if (current === taskId) box.replaceChildren();
    } catch (error) { say(error.message); }
  };
  if (pending.kind === "confirmation") {
    for (const [label, decision] of [["Approve", "approve"], ["Deny", "deny"]]) {
      const button = element("button", label);
      button.type = "button";
      button.dataset.decision = decision;
      button.addEventListener("click", () => answer(decision));
      div.appendChild(button);
    }
  } else {
    const field = element("input");
    field.type = "text";
    const button = element("button", "Answer");
    button.type = "button";
    button.addEventListener("click", () => answer(field.value));
    div.append(field, button);
  }
  box.appendChild(div);
}

function showEvent(kind, data) {
  let text = kind;
  if (kind === "plan") text += ": " + (data.text || "");
  else if (kind === "command") text += ": " + data.command + " " + JSON.stringify(data.arguments);
  else if (kind === "result") text += ": " + (data.ok ? data.output : "Error: " + data.error);
  else if (kind === "finished") text += ": " + data.status + " \u2014 " + (data.result || "");
  else if (kind === "confirmation") text += ": " + data.command + (data.approved ? " approved" : " refused");
  else if (kind === "session_end") text += ": " + data.status;
  $("events").appendChild(element("div", text, "event event-" + kind));
  $("events").scrollTop = $("events").scrollHeight;
}

// The task's event stream. The server ends a stream when the task finished (after a
// "finished" event) or when it stops; any other end (a restart, a proxy's timeout, the
// network) is followed by a new request that resumes after the last event seen.
async function watch(taskId) {
  const controller = new AbortController();
  streamAbort = controller;
  const signal = controller.signal;
  let lastId = "0";
  let retry = 2000;
  while (!signal.aborted) {
    let finished = false;
    try {
      const response = await fetch(API + "/" + taskId + "/events",
        { headers: headers({ "Last-Event-ID": lastId }), signal });
      if (!response.ok) {
        let message = "";
        try { message = (await response.json()).message; } catch (e) {}
        say("events: " + response.status + (message ? ": " + message : ""));
        if (response.status < 500) return;  // a wrong token or task: retrying cannot help
        throw new Error("events: " + response.status);
      }
      say("");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let kind = "message", data = [], id = null;
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) kind = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
            else if (line.startsWith("id:")) id = line.slice(3).trim();
            else if (line.startsWith("retry:")) {
              const ms = parseInt(line.slice(6).trim(), 10);
              if (ms > 0) retry = ms;
            }
          }
          if (id !== null) lastId = id;
          if (!data.length || current !== taskId) continue;
          const parsed = JSON.parse(data.join("\n"));
          if (kind.endsWith("_needed")) showPending(parsed);
          else {
            if (kind === "confirmation" || kind === "answer") showPending(null);
            showEvent(kind, parsed);
          }
          if (kind === "result" || kind === "finished") showArtifacts();
          if (kind === "finished") {
            finished = true;
            showPending(null);
            $("task-status").textContent = "Status: " + parsed.status;
            refresh();
          }
        }
      }
    } catch (error) {
      if (error.name === "AbortError" || signal.aborted) return;
      say(error.message + " (reconnecting to the event stream)");
    }
    if (finished) return;
    await sleep(retry, signal);
  }
}

// One look at the artifacts at a time (events come in bursts): a look asked for while one
// runs is made once it ends.
let artifactsLook = null;
let artifactsAgain = false;

async function showArtifacts() {
  if (artifactsLook) { artifactsAgain = true; return; }
  artifactsLook = (async () => {
    do {
      artifactsAgain = false;
      await serial(loadArtifacts);
    } while (artifactsAgain);
  })();
  try { await artifactsLook; } finally { artifactsLook = null; }
}

async function loadArtifacts() {
  if (!current) return;
  const taskId = current;
  try {
    const data = await (await call("GET", API + "/" + taskId + "/artifacts?page_size=100")).json();
    if (current !== taskId) return;
    const list = $("artifacts");
    list.replaceChildren();
    for (const artifact of data.artifacts) {
      const li = element("li");
      const path = artifact.relative_path ? artifact.relative_path + "/" : "";
      const link = element("a", path + artifact.file_name);
      link.href = "#";
      link.dataset.artifactId = artifact.artifact_id;
      link.addEventListener("click", async (e) => {
        e.preventDefault();
        try {
          const response = await call("GET", API + "/" + taskId + "/artifacts/" + artifact.artifact_id);
          const url = URL.createObjectURL(await response.blob());
          const a = element("a");
          a.href = url;
          a.download = artifact.file_name;
          document.body.appendChild(a);
          a.click();
          a.remove();
          setTimeout(() => URL.revokeObjectURL(url), 10000);
        } catch (error) { say(error.message); }
      });
      li.appendChild(link);
      list.appendChild(li);
    }
  } catch (error) { say(error.message); }
}

// -- plugins -------------------------------------------------------------------------

async function refreshPlugins() {
  if (noToken()) return;
  try {
    const data = await (await call("GET", PLUGINS)).json();
    const list = $("plugins");
    list.replaceChildren();
    for (const plugin of data.plugins) {
      let text = plugin.id + " \u2014 " + plugin.status;
      if (plugin.running.status === "broken" && plugin.status !== "broken") text += " (broken in this server)";
      if (plugin.restart_needed) text += " (restart needed)";
      const li = item(text, "plugin");
      li.dataset.pluginId = plugin.id;
      li.dataset.status = plugin.status;
      if (currentPlugin === plugin.id) li.classList.add("active");
      li.addEventListener("click", () => choosePlugin(plugin.id));
      list.appendChild(li);
    }
    $("plugins-note").textContent = data.overridden_by_environment
      ? "AUTOGPT_LOAD_PLUGINS is set where the server runs: it decides which plugins load, " +
        "whatever the config file says."
      : "Changes are written to the config file; each " + data.takes_effect + ".";
    say("");
  } catch (error) { say(error.message); }
}

async function choosePlugin(pluginId, message) {
  currentPlugin = pluginId;
  try {
    const plugin = await (await call("GET", PLUGINS + "/" + encodeURIComponent(pluginId))).json();
    if (currentPlugin !== pluginId) return;
    showPlugin(plugin, message || "");
  } catch (error) { say(error.message); }
  refreshPlugins();
}

function pluginMessage(text, cls) {
  const box = $("plugin-message");
  box.textContent = text || "";
  box.className = "message " + (cls || "");
}

function showPlugin(plugin, message) {
  $("plugin-title").textContent = plugin.name + " (" + plugin.id + " " + (plugin.version || "?") + ")";
  $("plugin-description").textContent = plugin.description || "";
  let state = "In the config file: " + plugin.status;
  if (plugin.reason) state += " \u2014 " + plugin.reason;
  $("plugin-state").textContent = state;
  $("plugin-state").className = plugin.status === "broken" ? "error" : "";
  let running = "In this server now: " + plugin.running.status;
  if (plugin.running.reason) running += " \u2014 " + plugin.running.reason;
  $("plugin-running").textContent = running;
  $("plugin-restart").textContent = plugin.restart_needed
    ? "Changed in the config file: this " + plugin.takes_effect + "."
    : "Any change here " + plugin.takes_effect + ".";
  pluginMessage(message);
  showPluginActions(plugin);
  showPermissions(plugin);
  showSettings(plugin);
  showCommands(plugin);
  $("plugin-details").hidden = false;
}

function showPluginActions(plugin) {
  const box = $("plugin-actions");
  box.replaceChildren();
  if (!plugin.configurable) return;
  const button = element("button", plugin.enabled ? "Disable" : "Enable");
  button.type = "button";
  button.id = "plugin-toggle";
  button.dataset.action = plugin.enabled ? "disable" : "enable";
  button.addEventListener("click", () => {
    if (plugin.enabled) setEnabled(plugin, "disable", false);
    else confirmEnable(plugin);
  });
  box.appendChild(button);
}

// Enabling shows what the plugin's commands may do, and the plugins it needs, first.
function confirmEnable(plugin) {
  const needed = plugin.requires.filter((r) => !r.enabled).map((r) => r.id);
  if (!plugin.permissions.length && !needed.length) { setEnabled(plugin, "enable", false); return; }
  const box = $("plugin-actions");
  box.replaceChildren();
  const panel = element("div", null, "pending");
  panel.id = "plugin-confirm";
  if (plugin.permissions.length) {
    panel.appendChild(element("p", "Enabling " + plugin.id + " lets its commands ask for these permissions:"));
    const list = element("ul");
    for (const p of plugin.permissions) list.appendChild(item(permissionText(p)));
    panel.appendChild(list);
  }
  if (needed.length) {
    panel.appendChild(element("p", plugin.id + " requires " + needed.join(", ") +
      ", which will be enabled too."));
  }
  const yes = element("button", "Enable " + plugin.id);
  yes.type = "button";
  yes.id = "plugin-confirm-enable";
  yes.addEventListener("click", () => setEnabled(plugin, "enable", needed.length > 0));
  const no = element("button", "Cancel");
  no.type = "button";
  no.addEventListener("click", () => showPluginActions(plugin));
  panel.append(yes, no);
  box.appendChild(panel);
}

async function setEnabled(plugin, action, includeRequired) {
  try {
    const body = action === "enable" ? { include_required: includeRequired } : {};
    const path = PLUGINS + "/" + encodeURIComponent(plugin.id) + "/" + action;
    const result = await (await call("POST", path, body)).json();
    let text = (action === "enable" ? "Enabled " : "Disabled ") + result.changed.join(", ") +
      " in the config file; this " + result.takes_effect + ".";
    if (result.dependents && result.dependents.length) {
      text += " " + result.dependents.join(", ") + " require(s) it and will not load until it is enabled.";
    }
    if (result.status === "broken") text += " It will not load: " + result.reason;
    showPlugin(result, text);
    refreshPlugins();
  } catch (error) {
    showPluginActions(plugin);
    pluginMessage(error.message, "error");
  }
}

function showPermissions(plugin) {
  const list = $("plugin-permissions");
  list.replaceChildren();
  if (!plugin.permissions.length) list.appendChild(item("none"));
  for (const p of plugin.permissions) list.appendChild(item(permissionText(p)));
}

function permissionText(p) {
  let text = p.name + " \u2014 " + p.description;
  if (!p.commands.length) return text + " (declared; none of its commands asks for it)";
  const who = p.commands.join(", ");
  return text + (p.granted
    ? " (granted by the config: " + who + " run(s) without asking)"
    : " (not granted: " + who + " ask(s) for consent each time, and are refused in unattended tasks)");
}

function showCommands(plugin) {
  const list = $("plugin-commands");
  list.replaceChildren();
  if (!plugin.commands.length) list.appendChild(item("none"));
  for (const c of plugin.commands) {
    let head = c.name;
    if (c.aliases.length) head += " (aliases: " + c.aliases.join(", ") + ")";
    if (c.permissions.length) head += " [needs " + c.permissions.join(", ") + "]";
    const li = item(head + ": " + c.description, "command");
    if (c.parameters.length) {
      const params = element("ul");
      for (const p of c.parameters) {
        params.appendChild(item(p.name + " (" + (p.type || "any") + ", " +
          (p.required ? "required" : "optional") + ")" + (p.description ? ": " + p.description : "")));
      }
      li.appendChild(params);
    }
    list.appendChild(li);
  }
}

function shown(value) { return typeof value === "string" ? value : JSON.stringify(value); }

// One form field per setting, from the manifest's config schema.
function settingInput(s) {
  let input;
  if (Array.isArray(s.enum) || s.type === "boolean") {
    input = element("select");
    const choices = Array.isArray(s.enum) ? s.enum : [true, false];
    const unset = element("option", s.default === null || s.default === undefined
      ? "(not set)" : "(default: " + shown(s.default) + ")");
    unset.value = "";
    input.appendChild(unset);
    choices.forEach((choice, i) => {
      const option = element("option", shown(choice));
      option.value = String(i);
      if (s.value !== null && JSON.stringify(s.value) === JSON.stringify(choice)) option.selected = true;
      input.appendChild(option);
    });
    input.dataset.choices = JSON.stringify(choices);
  } else if (s.type === "array" || s.type === "object") {
    input = element("textarea");
    input.rows = 3;
    input.value = s.value === null ? "" : JSON.stringify(s.value);
  } else {
    input = element("input");
    input.type = s.type === "integer" || s.type === "number" ? "number" : "text";
    if (s.type === "integer") input.step = "1";
    if (s.type === "number") input.step = "any";
    input.value = s.value === null ? "" : String(s.value);
  }
  if (s.default !== null && s.default !== undefined && input.tagName !== "SELECT") {
    input.placeholder = "default: " + shown(s.default);
  }
  input.id = "setting-" + s.name;
  input.name = s.name;
  input.dataset.setting = s.name;
  input.dataset.type = s.type;
  return input;
}

// The value of a field as JSON (null: not set, back to the default), or an Error.
function settingValue(s, input) {
  const raw = input.value;
  if (input.tagName === "SELECT") return raw === "" ? null : JSON.parse(input.dataset.choices)[Number(raw)];
  // A number field holds "" for text that is no number: that is an error, not "not set".
  if (input.validity && input.validity.badInput) {
    return new Error(s.type === "integer" ? "must be a whole number" : "must be a number");
  }
  if (raw.trim() === "") return null;
  if (s.type === "integer") {
    if (!/^\s*-?\d+\s*$/.test(raw)) return new Error("must be a whole number");
    return parseInt(raw, 10);
  }
  if (s.type === "number") {
    const n = Number(raw);
    return Number.isFinite(n) ? n : new Error("must be a number");
  }
  if (s.type === "array" || s.type === "object") {
    let value;
    try { value = JSON.parse(raw); } catch (e) { return new Error("must be JSON: " + e.message); }
    const isArray = Array.isArray(value);
    const ok = s.type === "array" ? isArray : value !== null && typeof value === "object" && !isArray;
    return ok ? value : new Error(s.type === "array" ? "must be a JSON list" : "must be a JSON object");
  }
  return raw;
}

function showSettings(plugin) {
  const form = $("plugin-settings");
  form.replaceChildren();
  if (!plugin.settings.length) { form.appendChild(element("p", "This plugin has no settings.")); return; }
  const fields = [];
  for (const s of plugin.settings) {
    const row = element("div", null, "setting");
    row.dataset.setting = s.name;
    const label = element("label", s.name + " (" + s.type + (s.required ? ", required" : "") + ")");
    label.htmlFor = "setting-" + s.name;
    row.appendChild(label);
    if (s.secret) {
      const where = s.env ? "set $" + s.env + " in the server's environment"
        : "write it into the config file yourself";
      row.appendChild(element("p", "Secret: " + (s.set ? "set" : "not set") +
        ". The console never shows or writes secrets: " + where + ".", "secret"));
      row.id = "setting-" + s.name;
    } else {
      const input = settingInput(s);
      row.appendChild(input);
      fields.push([s, input]);
      let hint = "";
      if (s.minimum !== null && s.minimum !== undefined && s.maximum !== null && s.maximum !== undefined) {
        hint += "From " + s.minimum + " to " + s.maximum + ". ";
      } else if (s.minimum !== null && s.minimum !== undefined) hint += "At least " + s.minimum + ". ";
      else if (s.maximum !== null && s.maximum !== undefined) hint += "At most " + s.maximum + ". ";
      if (s.env) hint += "$" + s.env + " overrides it" + (s.source === "environment" ? " (and is set now)" : "") + ". ";
      if (s.source === "config") hint += "Set in the config file.";
      else if (s.source === "default") hint += "Not set: the default applies.";
      if (hint) row.appendChild(element("p", hint.trim(), "hint"));
    }
    if (s.description) row.appendChild(element("p", s.description, "description"));
    const error = element("p", "", "error field-error");
    error.id = "setting-error-" + s.name;
    row.appendChild(error);
    form.appendChild(row);
  }
  if (!fields.length) return;
  const save = element("button", "Save settings");
  save.type = "submit";
  save.id = "plugin-save";
  form.appendChild(save);
  form.onsubmit = async (e) => {
    e.preventDefault();
    for (const node of form.querySelectorAll(".field-error")) node.textContent = "";
    const changes = {};
    let bad = false;
    for (const [s, input] of fields) {
      const value = settingValue(s, input);
      if (value instanceof Error) { $("setting-error-" + s.name).textContent = value.message; bad = true; continue; }
      if (JSON.stringify(value) !== JSON.stringify(s.value)) changes[s.name] = value;
    }
    if (bad) { pluginMessage("Fix the settings marked above.", "error"); return; }
    if (!Object.keys(changes).length) { pluginMessage("Nothing changed."); return; }
    try {
      const path = PLUGINS + "/" + encodeURIComponent(plugin.id) + "/settings";
      const result = await (await call("PUT", path, { settings: changes })).json();
      showPlugin(result, "Saved " + result.changed.join(", ") + " in the config file; this " +
        result.takes_effect + ".");
      refreshPlugins();
    } catch (error) {
      const named = /^settings\.([a-z][a-z0-9_]*): /.exec(error.text || "");
      if (named && $("setting-error-" + named[1])) $("setting-error-" + named[1]).textContent = error.text;
      pluginMessage(error.message, "error");
    }
  };
}

showView();
