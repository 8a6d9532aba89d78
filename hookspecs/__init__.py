"""The autogpt plugin contract: markers, hook specifications and the values they carry.

A plugin depends on this package alone (it needs only pluggy and attrs)::

    from hookspecs import hookimpl

    @hookimpl
    def build_prompt(session, prompt):
        prompt.add_constraint("Answer in French.")
"""

from __future__ import annotations

from . import _specs as specs
from ._markers import BLOCKING_ATTR as BLOCKING_ATTR
from ._markers import PROJECT_NAME as PROJECT_NAME
from ._markers import HookimplMarker as HookimplMarker
from ._markers import hookimpl as hookimpl
from ._markers import hookspec as hookspec
from ._text import DATA_RULE as DATA_RULE
from ._text import describe_call as describe_call
from ._text import printable as printable
from ._text import quote_data as quote_data
from ._types import JSON as JSON
from ._types import Budget as Budget
from ._types import CLIContext as CLIContext
from ._types import CLIHandler as CLIHandler
from ._types import CommandCall as CommandCall
from ._types import CommandContext as CommandContext
from ._types import CommandFunction as CommandFunction
from ._types import CommandResult as CommandResult
from ._types import CommandReview as CommandReview
from ._types import Confirmation as Confirmation
from ._types import ConfirmationRequest as ConfirmationRequest
from ._types import Event as Event
from ._types import EventKind as EventKind
from ._types import LLMProvider as LLMProvider
from ._types import LLMProviderFactory as LLMProviderFactory
from ._types import LLMRequest as LLMRequest
from ._types import LLMResponse as LLMResponse
from ._types import MemoryHit as MemoryHit
from ._types import MemoryItem as MemoryItem
from ._types import MemoryQuery as MemoryQuery
from ._types import Message as Message
from ._types import Plan as Plan
from ._types import PlanningContext as PlanningContext
from ._types import PlanReview as PlanReview
from ._types import PluginControl as PluginControl
from ._types import PluginSettings as PluginSettings
from ._types import PromptBuilder as PromptBuilder
from ._types import ProviderOptions as ProviderOptions
from ._types import ReadSecret as ReadSecret
from ._types import RegisterBridgedCommand as RegisterBridgedCommand
from ._types import RegisterCLICommand as RegisterCLICommand
from ._types import RegisterCommand as RegisterCommand
from ._types import RegisterLLMProvider as RegisterLLMProvider
from ._types import ReportUnmapped as ReportUnmapped
from ._types import Role as Role
from ._types import RuntimeView as RuntimeView
from ._types import SessionOutcome as SessionOutcome
from ._types import SessionView as SessionView
from ._types import ToolCall as ToolCall
from ._types import ToolSpec as ToolSpec
from ._types import Usage as Usage


def blocking(function: CommandFunction) -> CommandFunction:
    """Mark a command function (or hook implementation) that blocks: it runs in a worker thread."""
    setattr(function, BLOCKING_ATTR, True)
    return function


__all__ = [
    "BLOCKING_ATTR",
    "Budget",
    "CLIContext",
    "CLIHandler",
    "CommandCall",
    "CommandContext",
    "CommandFunction",
    "CommandResult",
    "CommandReview",
    "Confirmation",
    "ConfirmationRequest",
    "DATA_RULE",
    "Event",
    "EventKind",
    "HookimplMarker",
    "JSON",
    "LLMProvider",
    "LLMProviderFactory",
    "LLMRequest",
    "LLMResponse",
    "MemoryHit",
    "MemoryItem",
    "MemoryQuery",
    "Message",
    "PROJECT_NAME",
    "Plan",
    "PlanReview",
    "PlanningContext",
    "PluginControl",
    "PluginSettings",
    "PromptBuilder",
    "ProviderOptions",
    "ReadSecret",
    "RegisterBridgedCommand",
    "RegisterCLICommand",
    "RegisterCommand",
    "RegisterLLMProvider",
    "ReportUnmapped",
    "Role",
    "RuntimeView",
    "SessionOutcome",
    "SessionView",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "blocking",
    "describe_call",
    "hookimpl",
    "hookspec",
    "printable",
    "quote_data",
    "specs",
]
