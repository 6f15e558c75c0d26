"""A strict checker for the ATIF v1.7 fields this project writes: Harbor's own validator, ported (Harbor's
`harbor` package is not on the package index this project installs from). Its source: Harbor's pydantic
models, src/harbor/models/trajectories/{trajectory,step,agent,tool_call,observation}.py, and
rfcs/0001-trajectory-format.md. Its rules, kept here under Harbor's names: unknown fields are refused
(`extra: forbid`); `steps` is not empty and `validate_step_ids` (sequential from 1);
`validate_agent_only_fields` (model_name, reasoning_effort, reasoning_content, tool_calls, metrics only on
agent steps, even empty); `validate_llm_call_count_zero_fields`; `validate_timestamp` (ISO 8601);
`validate_tool_call_references` (no duplicate tool_call_id in a step, every observation result's
source_call_id a call of its step). `is_copied_context` (v1.5): "whether this step was copied from a
previous trajectory for context ... Steps marked as copied context should not be included in training
data"."""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class ObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class Observation(_Strict):
    results: list[ObservationResult]


AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[dict[str, Any]]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: dict[str, Any] | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    is_copied_context: bool | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_fields(self) -> Step:
        if self.timestamp is not None:
            datetime.datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
        if self.source != "agent":
            for name in AGENT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"step {self.step_id}: {name} on a {self.source} step")
        if self.llm_call_count == 0 and self.source == "agent" and (self.metrics or self.reasoning_content):
            raise ValueError(f"step {self.step_id}: LLM fields on a step of no LLM call")
        ids = [c.tool_call_id for c in self.tool_calls or []]
        if len(set(ids)) != len(ids):
            raise ValueError(f"step {self.step_id} has a duplicate tool_call_id")
        if self.observation is not None:
            for result in self.observation.results:
                if result.source_call_id is not None and result.source_call_id not in ids:
                    raise ValueError(
                        f"step {self.step_id}: result for {result.source_call_id}, not a call of this step"
                    )
        return self


class Agent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class Trajectory(_Strict):
    schema_version: Literal["ATIF-v1.7"]
    session_id: str | None = None
    trajectory_id: str
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _sequential(self) -> Trajectory:
        if [s.step_id for s in self.steps] != list(range(1, len(self.steps) + 1)):
            raise ValueError("step ids must run 1..n")
        if self.final_metrics and self.final_metrics.total_steps not in (None, len(self.steps)):
            raise ValueError("final_metrics.total_steps differs from the steps")
        return self
