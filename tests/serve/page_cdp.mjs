// page_cdp.mjs — opens a page in headless Chromium over the DevTools
// protocol, waits (in real time, up to 60 s) until a JS condition holds,
// then saves the DOM and a 1200x800 screenshot (tests/serve/t_page.sh).
// Unlike --dump-dom with a virtual-time budget, a slow server (a sanitizer
// build, a loaded machine) cannot cut the page off mid-reply.
//   node --experimental-websocket page_cdp.mjs CHROME PROFILE_DIR URL CONDITION_JS OUT.html OUT.png
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
const [chrome, profile, url, cond, outHtml, outPng] = process.argv.slice(2);
const proc = spawn(chrome, ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--remote-debugging-port=0", `--user-data-dir=${profile}`, "about:blank"],
                   { stdio: ["ignore", "ignore", "pipe"] });
const die = (msg) => { console.error(msg); proc.kill("SIGKILL"); process.exit(1); };
setTimeout(() => die("page_cdp: timed out"), 90000).unref();
const wsUrl = await new Promise((res, rej) => {
  let err = "";
  proc.stderr.on("data", (d) => {
    err += d;
    const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) res(m[1]);
  });
  proc.on("exit", () => rej(new Error("chromium exited: " + err.slice(-300))));
}).catch((e) => die(e.message));
const ws = new WebSocket(wsUrl);
await new Promise((res) => ws.addEventListener("open", res));
let id = 0;
const pending = new Map();
ws.addEventListener("message", (ev) => {
  const m = JSON.parse(ev.data);
  if (m.id && pending.has(m.id)) {
    const { res, rej } = pending.get(m.id);
    pending.delete(m.id);
    m.error ? rej(new Error(JSON.stringify(m.error))) : res(m.result);
  }
});
const send = (method, params = {}, sessionId) => new Promise((res, rej) => {
  pending.set(++id, { res, rej });
  ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
});
const { targetId } = await send("Target.createTarget", { url: "about:blank" });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
const s = (method, params) => send(method, params, sessionId);
await s("Emulation.setDeviceMetricsOverride", { width: 1200, height: 800, deviceScaleFactor: 1, mobile: false });
await s("Page.navigate", { url });
const evalJs = async (expr) => (await s("Runtime.evaluate", { expression: expr, returnByValue: true })).result.value;
let ok = false;
for (let i = 0; i < 600 && !ok; i++) {
  ok = await evalJs(`(() => { try { return !!(${cond}); } catch { return false; } })()`);
  if (!ok) await new Promise((r) => setTimeout(r, 100));
}
await new Promise((r) => setTimeout(r, 1500)); // a poll or two more for the memory plot
writeFileSync(outHtml, await evalJs("document.documentElement.outerHTML"));
writeFileSync(outPng, Buffer.from((await s("Page.captureScreenshot", { format: "png" })).data, "base64"));
console.log(ok ? "ok" : "condition never held");
await send("Browser.close").catch(() => {});
proc.kill("SIGKILL");
process.exit(0);
