// Preloaded into the SDK's Node (`--require`) when it records through the intercepting proxy.
// Node's http2 client has no proxy support (NODE_USE_ENV_PROXY covers http, https and fetch), and
// the SDK opens its agent stream with http2.connect: give each such session a CONNECT tunnel
// through HTTPS_PROXY, with TLS to the target host inside it, as a system proxy would.
"use strict";
const http2 = require("node:http2");
const net = require("node:net");
const tls = require("node:tls");
const { Duplex } = require("node:stream");

const proxy = new URL(process.env.HTTPS_PROXY);

// A byte stream to host:port through the proxy: writes wait for the proxy's 200.
function tunnel(host, port) {
  const raw = net.connect(Number(proxy.port), proxy.hostname);
  let head = Buffer.alloc(0);
  let open = false;
  let waiting = [];
  const stream = new Duplex({
    write(chunk, encoding, done) {
      if (open) raw.write(chunk, done);
      else waiting.push([chunk, done]);
    },
    read() {
      raw.resume();
    },
    final(done) {
      raw.end(done);
    },
    destroy(error, done) {
      raw.destroy();
      done(error);
    },
  });
  raw.on("data", (data) => {
    if (open) {
      if (!stream.push(data)) raw.pause();
      return;
    }
    head = Buffer.concat([head, data]);
    const end = head.indexOf("\r\n\r\n");
    if (end < 0) return;
    const status = head.toString("latin1", 0, head.indexOf("\r\n"));
    if (!/^HTTP\/1\.[01] 200/.test(status)) {
      stream.destroy(new Error(`proxy refused CONNECT ${host}:${port}: ${status}`));
      return;
    }
    open = true;
    for (const [chunk, done] of waiting) raw.write(chunk, done);
    waiting = [];
    if (head.length > end + 4) stream.push(head.subarray(end + 4));
  });
  raw.on("end", () => stream.push(null));
  raw.on("error", (error) => stream.destroy(error));
  raw.write(`CONNECT ${host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  return stream;
}

const connect = http2.connect;
http2.connect = function (authority, options, listener) {
  if (typeof options === "function") [listener, options] = [options, {}];
  const target = new URL(typeof authority === "string" ? authority : authority.href);
  if (target.protocol !== "https:") return connect.call(this, authority, options, listener);
  const port = Number(target.port || 443);
  const createConnection = () =>
    tls.connect({ socket: tunnel(target.hostname, port), servername: target.hostname, ALPNProtocols: ["h2"] });
  return connect.call(this, authority, { ...options, createConnection }, listener);
};
