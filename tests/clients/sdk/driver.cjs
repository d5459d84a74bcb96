// Drives Cursor's own agent SDK (@cursor/sdk) against a cursor-byok server, for the interop tests.
//
// Input (argv[2]): a JSON scenario {sdkDir, apiKey, model: {id, params?}, cwd, mcpServers?, steps: [...]};
// each step {prompt, cancelOn?: "text"} is one `agent.send` on the same agent.
// Output: one JSON object per line on stdout, each with `t` (ms since start, monotonic):
//   {kind: "created"} | {kind: "delta", step, update} | {kind: "message", step, message}
//   | {kind: "status", step, status} | {kind: "result", step, result} | {kind: "error", step?, error}
// The test reads these lines; all assertions live in Python.
"use strict";
const { createRequire } = require("node:module");
const path = require("node:path");

const scenario = JSON.parse(process.argv[2]);
const sdk = createRequire(path.join(scenario.sdkDir, "package.json"))("@cursor/sdk");
const started = performance.now();

function emit(record) {
  process.stdout.write(JSON.stringify({ t: performance.now() - started, ...record }) + "\n");
}

function described(error) {
  return { name: error?.name, message: String(error?.message ?? error), code: error?.code, isRetryable: error?.isRetryable };
}

async function main() {
  const agent = await sdk.Agent.create({
    apiKey: scenario.apiKey,
    model: scenario.model,
    local: { cwd: scenario.cwd },
    ...(scenario.mcpServers ? { mcpServers: scenario.mcpServers } : {}),
  });
  emit({ kind: "created", agentId: agent.agentId });
  for (const [step, plan] of scenario.steps.entries()) {
    let run;
    let cancelling = null;
    const onDelta = ({ update }) => {
      emit({ kind: "delta", step, update });
      if (plan.cancelOn === "text" && update.type === "text-delta" && cancelling === null && run) {
        cancelling = run.cancel();
      }
    };
    try {
      run = await agent.send(plan.prompt, { onDelta });
      run.onDidChangeStatus((status) => emit({ kind: "status", step, status }));
      for await (const message of run.stream()) emit({ kind: "message", step, message });
      if (cancelling) await cancelling;
      const result = await run.wait();
      emit({ kind: "result", step, result });
    } catch (error) {
      emit({ kind: "error", step, error: described(error) });
    }
  }
  agent.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    emit({ kind: "error", error: described(error) });
    process.exit(1);
  },
);
