"use strict";
const API = "/ap/v1/agent/tasks";
const $ = (id) => document.getElementById(id);
const tokenField = $("token");
tokenField.value = localStorage.getItem("autogpt-token") || "";
tokenField.addEventListener("change", () => {
  localStorage.setItem("autogpt-token", tokenField.value.trim());
  refresh();
});
let current = null;
let streamAbort = null;

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const token = tokenField.value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

async function call(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) {
    let message = response.status + "";
    try { message += ": " + (await response.json()).message; } catch (e) {}
    throw new Error(message);
  }
  return response;
}

function say(text) { $("status").textContent = text || ""; }

function item(text, cls) {
  const li = document.createElement("li");
  li.textContent = text;
  if (cls) li.className = cls;
  return li;
}

async function refresh() {
  try {
    const data = await (await call("GET", API + "?page_size=100")).json();
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
    const task = await (await call("POST", API, {
      input: goal, additional_input: { autonomous: $("autonomous").checked } })).json();
    $("goal").value = "";
    await refresh();
    choose(task.task_id);
  } catch (error) { say(error.message); }
});

async function choose(taskId) {
  current = taskId;
  if (streamAbort) streamAbort.abort();
  $("events").replaceChildren();
  $("pending").replaceChildren();
  try {
    const task = await (await call("GET", API + "/" + taskId)).json();
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
  const div = document.createElement("div");
  div.className = "pending";
  const text = document.createElement("p");
  if (pending.kind === "confirmation") {
    text.textContent = "Allow " + pending.command + " (" + pending.plugin + ", needs " +
      pending.missing_permissions.join(", ") + ")? Arguments: " + JSON.stringify(pending.arguments);
  } else {
    text.textContent = "The agent asks: " + pending.question;
  }
  div.appendChild(text);
  const answer = async (decision) => {
    try {
      await call("POST", API + "/" + current + "/confirmations/" + pending.id,
                 pending.kind === "confirmation" ? { decision } : { answer: decision });
      box.replaceChildren();
    } catch (error) { say(error.message); }
  };
  if (pending.kind === "confirmation") {
    for (const [label, decision] of [["Approve", "approve"], ["Deny", "deny"]]) {
      const button = document.createElement("button");
      button.textContent = label;
      button.dataset.decision = decision;
      button.addEventListener("click", () => answer(decision));
      div.appendChild(button);
    }
  } else {
    const field = document.createElement("input");
    field.type = "text";
    const button = document.createElement("button");
    button.textContent = "Answer";
    button.addEventListener("click", () => answer(field.value));
    div.append(field, button);
  }
  box.appendChild(div);
}

function showEvent(kind, data) {
  const line = document.createElement("div");
  line.className = "event event-" + kind;
  let text = kind;
  if (kind === "plan") text += ": " + (data.text || "");
  else if (kind === "command") text += ": " + data.command + " " + JSON.stringify(data.arguments);
  else if (kind === "result") text += ": " + (data.ok ? data.output : "Error: " + data.error);
  else if (kind === "finished") text += ": " + data.status + " \u2014 " + (data.result || "");
  else if (kind === "confirmation") text += ": " + data.command + (data.approved ? " approved" : " refused");
  else if (kind === "session_end") text += ": " + data.status;
  line.textContent = text;
  $("events").appendChild(line);
  $("events").scrollTop = $("events").scrollHeight;
}

async function watch(taskId) {
  const controller = new AbortController();
  streamAbort = controller;
  let lastId = "0";
  try {
    const response = await fetch(API + "/" + taskId + "/events",
      { headers: headers({ "Last-Event-ID": lastId }), signal: controller.signal });
    if (!response.ok) { say("events: " + response.status); return; }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let kind = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) kind = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
          else if (line.startsWith("id: ")) lastId = line.slice(4);
        }
        if (!data) continue;
        const parsed = JSON.parse(data);
        if (kind.endsWith("_needed")) showPending(parsed);
        else {
          if (kind === "confirmation") showPending(null);
          showEvent(kind, parsed);
        }
        if (kind === "result" || kind === "finished") showArtifacts();
        if (kind === "finished") { $("task-status").textContent = "Status: " + parsed.status; refresh(); }
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") say(error.message);
  }
}

async function showArtifacts() {
  if (!current) return;
  try {
    const data = await (await call("GET", API + "/" + current + "/artifacts?page_size=100")).json();
    const list = $("artifacts");
    list.replaceChildren();
    for (const artifact of data.artifacts) {
      const li = document.createElement("li");
      const link = document.createElement("a");
      const path = artifact.relative_path ? artifact.relative_path + "/" : "";
      link.textContent = path + artifact.file_name;
      link.href = "#";
      link.dataset.artifactId = artifact.artifact_id;
      link.addEventListener("click", async (e) => {
        e.preventDefault();
        const response = await call("GET", API + "/" + current + "/artifacts/" + artifact.artifact_id);
        const url = URL.createObjectURL(await response.blob());
        const a = document.createElement("a");
        a.href = url;
        a.download = artifact.file_name;
        document.body.appendChild(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
      });
      li.appendChild(link);
      list.appendChild(li);
    }
  } catch (error) { say(error.message); }
}

refresh();
