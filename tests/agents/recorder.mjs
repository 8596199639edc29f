// A recording reverse proxy for the agent tests: forwards every request to `kapitsa serve` unchanged
// and keeps each request body and the (streamed) response body, so a test can see what an agent sent
// (tool_choice, tools, message history) and what the server generated. Loopback only; no dependencies.
// Also: extracting the generated text / tool calls from the three APIs' responses (SSE or JSON).
// `rewrite(rec, body)` may return a changed request body (a test device: forcing a tool call that no
// agent forces by itself); the record keeps both.
import http from "node:http";

export async function startRecorder(targetPort, { targetHost = "127.0.0.1", rewrite = null } = {}) {
  const records = [];
  const server = http.createServer((req, res) => {
    const rec = { method: req.method, url: req.url, headers: { ...req.headers }, started: Date.now(), body: "", status: 0, response: "" };
    records.push(rec);
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      rec.body = Buffer.concat(chunks).toString("utf8");
      let payload = Buffer.concat(chunks);
      const headers = { ...req.headers };
      delete headers["accept-encoding"];  // keep the recorded response readable (no gzip/zstd)
      if (rewrite) {
        let parsed = null;
        try { parsed = JSON.parse(rec.body); } catch { /* not JSON: never rewritten */ }
        const changed = parsed && rewrite(rec, parsed);
        if (changed) {
          rec.originalBody = rec.body;
          rec.body = JSON.stringify(changed);
          payload = Buffer.from(rec.body, "utf8");
          headers["content-length"] = String(payload.length);
          delete headers["transfer-encoding"];
        }
      }
      const up = http.request({ host: targetHost, port: targetPort, method: req.method, path: req.url, headers }, (ur) => {
        rec.status = ur.statusCode;
        res.writeHead(ur.statusCode, ur.headers);
        const out = [];
        ur.on("data", (c) => { out.push(c); res.write(c); });
        ur.on("end", () => { rec.response = Buffer.concat(out).toString("utf8"); rec.ended = Date.now(); res.end(); });
      });
      up.on("error", (e) => { rec.error = String(e); res.writeHead(502); res.end(); });
      up.end(payload.length ? payload : undefined);
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: server.address().port,
    records,
    close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }),
  };
}

function sseEvents(text) {
  const events = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    let event = null;
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (!data.length) continue;
    const joined = data.join("\n");
    if (joined === "[DONE]") continue;
    try { events.push({ event, data: JSON.parse(joined) }); } catch { /* not JSON: ignore */ }
  }
  return events;
}

// What the server generated in one response: { text, toolCalls: [{name, arguments}], finish, prompt }
// (prompt: { tokens, cached } from the response's usage, where it reports them).
export function generated(rec) {
  const out = { text: "", reasoning: "", toolCalls: [], finish: null, prompt: {} };
  const noteUsage = (u) => {
    if (!u) return;
    const cached = u.cache_read_input_tokens ?? u.prompt_tokens_details?.cached_tokens ?? u.input_tokens_details?.cached_tokens;
    // Anthropic's input_tokens leaves out the tokens read from the cache; the OpenAI APIs' counts include them.
    const tokens = u.prompt_tokens ?? (u.cache_read_input_tokens !== undefined ? u.input_tokens + u.cache_read_input_tokens : u.input_tokens);
    if (tokens !== undefined) out.prompt.tokens = tokens;
    if (cached !== undefined) out.prompt.cached = cached;
  };
  const isSse = /^(event|data):/m.test(rec.response);
  if (!isSse) {
    let j;
    try { j = JSON.parse(rec.response); } catch { return out; }
    if (j.choices) {
      const m = j.choices[0]?.message ?? {};
      out.text = m.content ?? "";
      for (const c of m.tool_calls ?? []) out.toolCalls.push({ name: c.function.name, arguments: c.function.arguments, callId: c.id });
      out.finish = j.choices[0]?.finish_reason;
      noteUsage(j.usage);
    } else if (j.type === "message") {
      for (const b of j.content ?? []) {
        if (b.type === "text") out.text += b.text;
        if (b.type === "tool_use") out.toolCalls.push({ name: b.name, arguments: JSON.stringify(b.input), callId: b.id });
      }
      out.finish = j.stop_reason;
      noteUsage(j.usage);
    } else if (j.output) {
      for (const item of j.output) collectResponsesItem(item, out);
      out.finish = j.status;
      noteUsage(j.usage);
    }
    return out;
  }
  for (const { data } of sseEvents(rec.response)) {
    noteUsage(data.usage ?? data.message?.usage ?? data.response?.usage);
    if (data.choices) {  // chat completions chunk
      const c = data.choices[0];
      if (!c) continue;
      if (typeof c.delta?.content === "string") out.text += c.delta.content;
      if (typeof c.delta?.reasoning_content === "string") out.reasoning += c.delta.reasoning_content;
      for (const t of c.delta?.tool_calls ?? []) {
        const i = t.index ?? 0;
        out.toolCalls[i] ??= { name: "", arguments: "" };
        if (t.id) out.toolCalls[i].callId = t.id;
        if (t.function?.name) out.toolCalls[i].name += t.function.name;
        if (t.function?.arguments) out.toolCalls[i].arguments += t.function.arguments;
      }
      if (c.finish_reason) out.finish = c.finish_reason;
    } else if (data.type === "content_block_start" && data.content_block?.type === "tool_use") {
      out.toolCalls[data.index] = { name: data.content_block.name, arguments: "", callId: data.content_block.id };
    } else if (data.type === "content_block_delta") {
      if (data.delta?.type === "text_delta") out.text += data.delta.text;
      if (data.delta?.type === "thinking_delta") out.reasoning += data.delta.thinking;
      if (data.delta?.type === "input_json_delta") out.toolCalls[data.index].arguments += data.delta.partial_json;
    } else if (data.type === "message_delta") {
      out.finish = data.delta?.stop_reason ?? out.finish;
    } else if (data.type === "response.reasoning_text.delta") {
      out.reasoning += data.delta ?? "";
    } else if (data.type === "response.output_item.done") {
      collectResponsesItem(data.item, out);
    } else if (data.type === "response.completed") {
      out.finish = data.response?.status ?? "completed";
    }
  }
  out.toolCalls = out.toolCalls.filter(Boolean);
  return out;
}

function collectResponsesItem(item, out) {
  if (item?.type === "message") {
    for (const p of item.content ?? []) if (p.type === "output_text") out.text += p.text;
  } else if (item?.type === "function_call") {
    out.toolCalls.push({ name: item.name, arguments: item.arguments, callId: item.call_id });
  } else if (item?.type === "custom_tool_call") {
    out.toolCalls.push({ name: item.name, arguments: item.input, callId: item.call_id });
  }
}

// The model calls among the records (POSTs to the generation endpoints).
export function modelCalls(records) {
  return records.filter((r) => r.method === "POST" && /\/v1\/(chat\/completions|responses|messages)(\?|$)/.test(r.url));
}

// Does this request body carry the result of tool call `callId` (in any of the three APIs' shapes)?
export function carriesToolResult(body, callId) {
  for (const m of body.messages ?? []) {
    if (m.role === "tool" && m.tool_call_id === callId) return true;  // chat completions
    if (Array.isArray(m.content) && m.content.some((b) => b.type === "tool_result" && b.tool_use_id === callId)) return true;  // anthropic
  }
  if (Array.isArray(body.input))  // responses
    return body.input.some((i) => (i.type === "function_call_output" || i.type === "custom_tool_call_output") && i.call_id === callId);
  return false;
}

// tool_choice naming one tool, in the API of `url`.
export function namedToolChoice(url, name) {
  if (url.startsWith("/v1/messages")) return { type: "tool", name };
  if (url.startsWith("/v1/responses")) return { type: "function", name };
  return { type: "function", function: { name } };
}
