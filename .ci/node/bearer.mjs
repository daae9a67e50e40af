// Preloaded into the conformance runner (`node --import`): its server scenarios take a URL and
// nothing else, but `mltriage serve --http` answers only requests that carry the bearer token.
// Every request the runner makes goes through undici's global dispatcher (Node's fetch and the
// `undici.request` the DNS-rebinding scenario uses), so one interceptor adds
// `Authorization: Bearer $MCP_BEARER_TOKEN` to requests for $MCP_BEARER_ORIGIN, and only to those.
import { Agent, setGlobalDispatcher } from "undici";

const token = process.env.MCP_BEARER_TOKEN;
const origin = process.env.MCP_BEARER_ORIGIN;

if (token && origin) {
  const withBearer = (dispatch) => (opts, handler) => {
    if (String(opts.origin).replace(/\/$/, "") !== origin) return dispatch(opts, handler);
    const value = `Bearer ${token}`;
    let headers = opts.headers ?? {};
    if (Array.isArray(headers)) headers = [...headers, "authorization", value];
    else if (typeof headers[Symbol.iterator] === "function") headers = [...[...headers].flat(), "authorization", value];
    else headers = { ...headers, authorization: value };
    return dispatch({ ...opts, headers }, handler);
  };
  setGlobalDispatcher(new Agent().compose(withBearer));
}
