"""Commands that steer the session itself: ``finish`` it, or ``ask_user`` a question."""

from __future__ import annotations

from hookspecs import CommandContext, CommandResult, RegisterCommand, hookimpl

NO_USER = "No user is available to answer; decide on your own and continue."


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("finish", finish)
    register("ask_user", ask_user)


def finish(result: str) -> CommandResult:
    """End the session with ``result`` as its outcome."""
    return CommandResult.finished(result)


async def ask_user(question: str, ctx: CommandContext) -> str:
    """Ask the user through whichever plugin answers ``user_input``; say so if nobody can."""
    answer = await ctx.ask_user(question)
    if answer is None:
        return NO_USER
    if not answer.strip():
        return "The user gave an empty answer."
    return answer
