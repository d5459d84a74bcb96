// One agent turn driven by Buf's connect-es against the real server (tests/clients/connect).
// argv[2]: JSON {baseUrl, descriptorSet, transport, requestId, runRequestHex, workspace}
// transport: "connect-h1" (BidiAppend through connect-es' Connect transport over HTTP/1.1; RunSSE
//   read with its envelope reader, as stock connect-es refuses RunSSE's text/event-stream type),
//   "grpc-web" (RunSSE and BidiAppend through its gRPC-Web transport, HTTP/1.1),
//   "connect-h2", "grpc-web-h2" (one HTTP/2 Run stream through its Connect or gRPC-Web transport, h2c).
// Prints one JSON line: {text, execs, kvAcks, error?: {code, message, details: [{error, isRetryable}]}}.
import { readFileSync } from "node:fs";
import { create, createFileRegistry, fromBinary, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { createEnvelopeReadableStream } from "@connectrpc/connect/protocol";
import { endStreamFromJson } from "@connectrpc/connect/protocol-connect";

const args = JSON.parse(process.argv[2]);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(args.descriptorSet)));
const message = (name) => registry.getMessage(name);
const AgentClientMessage = message("agent.v1.AgentClientMessage");
const AgentServerMessage = message("agent.v1.AgentServerMessage");
const BidiAppendRequest = message("aiserver.v1.BidiAppendRequest");
const BidiRequestId = message("agent.v1.BidiRequestId");
const ErrorDetails = message("aiserver.v1.ErrorDetails");
const agentService = registry.getService("agent.v1.AgentService");
const bidiService = registry.getService("aiserver.v1.BidiService");

const result = { text: "", execs: [], kvAcks: 0 };
const hex = (bytes) => Buffer.from(bytes).toString("hex");

function transportFor(kind) {
  const httpVersion = kind.endsWith("-h2") ? "2" : "1.1";
  if (kind.startsWith("grpc-web")) return createGrpcWebTransport({ baseUrl: args.baseUrl, httpVersion });
  return createConnectTransport({ baseUrl: args.baseUrl, httpVersion, useBinaryFormat: true });
}

// What the IDE answers: a KV set_blob with its ack, a Read with the file's content.
function replyTo(msg) {
  if (msg.message.case === "kvServerMessage" && msg.message.value.message.case === "setBlobArgs") {
    result.kvAcks += 1;
    return create(AgentClientMessage, {
      message: { case: "kvClientMessage", value: { id: msg.message.value.id, message: { case: "setBlobResult", value: {} } } },
    });
  }
  if (msg.message.case === "execServerMessage") {
    const exec = msg.message.value;
    result.execs.push(exec.message.case);
    if (exec.message.case === "readArgs") {
      const content = readFileSync(exec.message.value.path, "utf8");
      return create(AgentClientMessage, {
        message: {
          case: "execClientMessage",
          value: { id: exec.id, execId: exec.execId, message: { case: "readResult", value: { result: { case: "success", value: { output: { case: "content", value: content } } } } } },
        },
      });
    }
  }
  return undefined;
}

function take(msg) {
  if (msg.message.case === "interactionUpdate" && msg.message.value.message.case === "textDelta") {
    result.text += msg.message.value.message.value.text;
  }
  return replyTo(msg);
}

function describe(err) {
  const error = ConnectError.from(err);
  return {
    code: Code[error.code],
    message: error.rawMessage,
    details: error.findDetails(ErrorDetails).map((d) => ({ error: d.error, isRetryable: d.details?.isRetryable ?? null })),
  };
}

// RunSSE + BidiAppend: appends through connect-es' client, the stream through `read`.
async function sseTurn(transport, read) {
  const bidi = createClient(bidiService, transport);
  let seqno = 0n;
  const append = (msg) =>
    bidi.bidiAppend(
      create(BidiAppendRequest, { data: hex(toBinary(AgentClientMessage, msg)), requestId: { requestId: args.requestId }, appendSeqno: seqno++ }),
    );
  const first = append(fromBinary(AgentClientMessage, Buffer.from(args.runRequestHex, "hex")));
  for await (const msg of read()) {
    const reply = take(msg);
    if (reply !== undefined) await append(reply);
  }
  await first;
}

// RunSSE as Cursor's transport reads it: its envelopes with connect-es' envelope reader, the
// end-stream frame with its Connect end-stream parser.
async function* rawRunSse() {
  const body = new Uint8Array([0, 0, 0, 0, 0, ...toBinary(BidiRequestId, create(BidiRequestId, { requestId: args.requestId }))]);
  new DataView(body.buffer).setUint32(1, body.length - 5);
  const response = await fetch(`${args.baseUrl}/agent.v1.AgentService/RunSSE`, {
    method: "POST",
    headers: { "content-type": "application/connect+proto", "connect-protocol-version": "1" },
    body,
  });
  if (response.status !== 200) throw new ConnectError(`HTTP ${response.status}`, Code.Internal);
  const reader = createEnvelopeReadableStream(response.body).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    if (value.flags & 0b10) {
      const end = endStreamFromJson(value.data);
      if (end.error) throw end.error;
      return;
    }
    yield fromBinary(AgentServerMessage, value.data);
  }
}

// One HTTP/2 Run stream: the first message, then the replies, on the request side.
async function runTurn(transport) {
  const agent = createClient(agentService, transport);
  const queue = [fromBinary(AgentClientMessage, Buffer.from(args.runRequestHex, "hex"))];
  let wake;
  let open = true;
  async function* requests() {
    while (open) {
      if (queue.length) yield queue.shift();
      else await new Promise((resolve) => (wake = resolve));
    }
  }
  try {
    for await (const msg of agent.run(requests(), { headers: { "x-request-id": args.requestId } })) {
      const reply = take(msg);
      if (reply !== undefined) {
        queue.push(reply);
        wake?.();
      }
    }
  } finally {
    open = false;
    wake?.();
  }
}

try {
  const transport = transportFor(args.transport);
  if (args.transport.endsWith("-h2")) await runTurn(transport);
  else if (args.transport === "grpc-web") {
    const agent = createClient(agentService, transport);
    await sseTurn(transport, () => agent.runSSE(create(BidiRequestId, { requestId: args.requestId })));
  } else await sseTurn(transport, rawRunSse);
} catch (err) {
  result.error = describe(err);
}
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(0);
