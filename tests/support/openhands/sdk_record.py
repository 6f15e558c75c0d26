"""Run inside the sandbox with the pinned SDK's interpreter: one V1 conversation against the scripted upstream.

argv: a JSON spec {model, base_url, cwd, persistence_dir, conversation_id, task, max_iterations}.
Prints one JSON line with the conversation's final execution status.
"""

import json
import sys
import uuid

from openhands.sdk import LLM, Conversation
from openhands.tools.preset.default import get_default_agent
from pydantic import SecretStr

spec = json.loads(sys.argv[1])
llm = LLM(
    model=spec["model"], base_url=spec["base_url"], api_key=SecretStr("sk-fake-recorder"), usage_id="agent"
)
agent = get_default_agent(llm, cli_mode=True)
conversation = Conversation(
    agent=agent,
    workspace=spec["cwd"],
    persistence_dir=spec["persistence_dir"],
    conversation_id=uuid.UUID(spec["conversation_id"]),
    visualizer=None,
    max_iteration_per_run=spec["max_iterations"],
    delete_on_close=False,
)
conversation.send_message(spec["task"])
conversation.run()
print(json.dumps({"status": conversation.state.execution_status.value}))
conversation.close()
