// The Pi companion: runs inside the sandbox with the pinned package and Node.js, never on the host.
//
//   rerun SPEC SOCKET   replay a session's tool calls with Pi's own agent loop and tools: an AgentSession
//                       (the CLI's own tools, hooks and parallel execution) whose model stream returns the
//                       historical assistant messages; each step waits for {"step": k} on the socket and
//                       answers {"step": k, "results": [toolResult messages]} once Pi executed its calls.
//   continue SPEC       open the rebuilt session file and continue it through the bridge: Pi's native
//                       agent.continue() without a prompt, prompt() with the boundary prompt.
// Events are printed one JSON object per line on stdout.
import { readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";

const PI = "/usr/local/lib/node_modules/@mariozechner/pi-coding-agent/dist/index.js";
const { AuthStorage, createAgentSession, ModelRegistry, SessionManager } = await import(PI);

const [mode, specPath, socketPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, "utf8"));
const print = (event) => process.stdout.write(JSON.stringify(event) + "\n");

function stream(message) {
  const type = message.stopReason === "aborted" || message.stopReason === "error" ? "error" : "done";
  return {
    async *[Symbol.asyncIterator]() {
      yield { type, reason: message.stopReason, message, error: message };
    },
    result: async () => message,
  };
}

function aborted(model) {
  return {
    role: "assistant", content: [], api: model.api, provider: model.provider, model: model.id,
    usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0,
             cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
    stopReason: "aborted", timestamp: Date.now(),
  };
}

const textOf = (message) =>
  typeof message.content === "string"
    ? message.content
    : message.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

async function rerun() {
  const messages = spec.messages; // the branch's messages in chronological order
  const stepOf = new Map(Object.entries(spec.step_of).map(([at, step]) => [Number(at), step]));
  let requested = 0;
  let stopped = false;
  let wake = null;
  const server = net.createServer((conn) => {
    let buffer = "";
    conn.on("data", (chunk) => {
      buffer += chunk;
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        requested = Math.max(requested, JSON.parse(line).step);
        wake?.();
      }
    });
    conn.on("close", () => { stopped = true; wake?.(); });
    reply = (obj) => conn.write(JSON.stringify(obj) + "\n");
  });
  let reply = () => {};
  await new Promise((resolve) => server.listen(socketPath, resolve));
  const until = (ready) => new Promise((resolve) => {
    const check = () => (ready() ? resolve() : (wake = check));
    check();
  });

  const { session } = await createAgentSession({
    cwd: spec.cwd, agentDir: spec.agent_dir, sessionManager: SessionManager.inMemory(spec.cwd),
  });
  let next = 0;
  let current = null; // [index, step] of the assistant message whose tools run now
  session.agent.streamFn = async (model) => {
    while (next < messages.length && messages[next].role !== "assistant") next++;
    if (next >= messages.length || stopped) return stream(aborted(model));
    const at = next++;
    const step = stepOf.get(at);
    if (step !== undefined) {
      await until(() => stopped || requested >= step);
      if (stopped) return stream(aborted(model));
      current = [at, step];
    }
    return stream(messages[at]);
  };
  session.subscribe((event) => {
    if (event.type === "turn_end" && current) {
      // a step the replayer did not ask for (its calls keep their historical results) runs unanswered
      if (current[1] === requested) reply({ step: current[1], results: event.toolResults });
      current = null;
    }
  });
  for (let at = 0; at < messages.length && !stopped; at++) {
    if (messages[at].role !== "user" || at < next) continue;
    next = at + 1;
    await session.prompt(textOf(messages[at]), { expandPromptTemplates: false });
    at = next - 1;
  }
  server.close();
  process.exit(0);
}

function option(name) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : undefined;
}

async function continueSession() {
  // The model is the bridge's: one OpenAI-compatible provider in models.json, as for the CLI.
  const [provider, ...rest] = option("--model").split("/");
  const modelId = rest.join("/");
  const modelsPath = join(spec.agent_dir, "models.json");
  const models = JSON.parse(readFileSync(modelsPath, "utf8"));
  const known = Object.values(models.providers)[0];
  models.providers = { [provider]: { ...known, baseUrl: process.env.REPLAYER_PI_BASE_URL,
    models: [{ ...known.models[0], id: modelId, name: modelId }] } };
  writeFileSync(modelsPath, JSON.stringify(models, null, 2));
  // the static factories came later (AuthStorage.create after 0.45.7, ModelRegistry.create after
  // 0.55.4); older versions construct them directly
  const authPath = join(spec.agent_dir, "auth.json");
  const authStorage = AuthStorage.create ? AuthStorage.create(authPath) : new AuthStorage(authPath);
  const modelRegistry = ModelRegistry.create
    ? ModelRegistry.create(authStorage, modelsPath)
    : new ModelRegistry(authStorage, modelsPath);
  const { session } = await createAgentSession({
    cwd: spec.cwd, agentDir: spec.agent_dir, sessionManager: SessionManager.open(spec.session_file),
    authStorage, modelRegistry, model: modelRegistry.find(provider, modelId),
  });
  session.subscribe((event) => print(event));
  const prompt = option("--prompt");
  if (prompt !== undefined) {
    await session.prompt(prompt, { expandPromptTemplates: false });
  } else {
    await session.agent.continue();
  }
  print({ type: "companion_exit" });
  process.exit(0);
}

if (mode === "rerun") await rerun();
else if (mode === "continue") await continueSession();
else { console.error(`unknown mode ${mode}`); process.exit(2); }
