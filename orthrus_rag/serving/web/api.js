// The server's own API: requests with the tab's API key, the streamed /v1/rag, and errors a person understands.

const KEY = "orthrus-api-key";

export class ApiError extends Error {
  constructor(message, { status = 0, code = null, needsKey = false } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.needsKey = needsKey;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key) {
  sessionStorage.setItem(KEY, key);
}

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function send(path, init) {
  try {
    return await fetch(path, init);
  } catch (err) {
    throw new ApiError("Lost the connection to the server: is it still running? The page keeps working; " +
                       "try again once it is back.");
  }
}

export async function getJSON(path) {
  const response = await send(path, { headers: headers(false) });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

// POST /v1/rag with stream: true; onEvent gets each event object in order. Resolves once the stream ends.
export async function streamRag(body, onEvent, signal) {
  const response = await send("/v1/rag", {
    method: "POST", headers: headers(true), body: JSON.stringify({ ...body, stream: true }), signal,
  });
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let ended = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const data = buffer.slice(0, cut).replace(/^data: /, "");
        buffer = buffer.slice(cut + 2);
        if (data === "[DONE]") ended = true;
        else onEvent(JSON.parse(data));
      }
    }
  } catch (err) {
    if (signal && signal.aborted) throw err;
    throw new ApiError("Lost the connection to the server while the answer was coming; the question was " +
                       "stopped. Ask again once the server is reachable.");
  }
  if (!ended) {
    throw new ApiError("The answer stopped before it finished (the server's time limit or a lost connection). " +
                       "Ask again, or with fewer steps.");
  }
}

async function errorOf(response) {
  let error = {};
  try {
    error = (await response.json()).error || {};
  } catch (err) { /* not JSON: the status says enough */ }
  return new ApiError(explain(response.status, error), { status: response.status, code: error.code,
                                                         needsKey: response.status === 401 });
}

// The message shown for an error object ({message, code, ...}) with its HTTP status (0: inside a stream).
export function explain(status, error) {
  const detail = error.message ? ` (${error.message})` : "";
  if (status === 401) return "This server needs an API key: enter it above.";
  if (status === 429 || error.type === "rate_limit_error") {
    return "The server is busy: too many questions are in flight for this key, or its queue is full. Wait for " +
           `one to finish, then ask again${detail}.`;
  }
  if (status === 504 || error.code === "request_timeout") {
    return `The question took longer than the server allows and was stopped${detail}. Try fewer steps or a ` +
           "smaller k.";
  }
  if (status === 503) return `The server cannot answer right now${detail}. Try again in a moment.`;
  if (status === 400 || error.type === "invalid_request_error") return `The server refused the question${detail}.`;
  return `Something went wrong on the server${detail}. The page keeps working: try again.`;
}
