"""A strict checker for the ATIF v1.7 fields this project writes, from the RFC's field tables (Harbor
rfcs/0001-trajectory-format.md, v1.7 changelog): unknown fields are refused, step ids run from 1,
agent-only fields appear only on agent steps, every observation result answers a call of its step."""

from __future__ import annotations

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


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    message: str | list[dict[str, Any]]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: dict[str, Any] | None = None
    llm_call_count: int | None = None
    is_copied_context: bool | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_fields(self) -> Step:
        if self.source != "agent" and (
            self.tool_calls or self.model_name or self.reasoning_content or self.metrics
        ):
            raise ValueError(f"step {self.step_id}: agent-only fields on a {self.source} step")
        if self.observation is not None:
            ids = {c.tool_call_id for c in self.tool_calls or []}
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
    steps: list[Step]
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
