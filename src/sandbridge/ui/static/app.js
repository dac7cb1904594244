// The sandbridge dashboard. Everything a session says (names, reasons, paths, commands)
// is untrusted: it only ever reaches the page as textContent, never as HTML.
"use strict";

const csrf = document.querySelector('meta[name="sandbridge-csrf"]').content;
const statusLine = document.getElementById("status");

function say(text, isError) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", Boolean(isError));
}

// ``text`` into ``el`` as text only, each run without white space in a span of its own
// that never breaks: a line breaks between tokens, never inside a path, a URL or a key
// (a browser breaks those after "/" or "-"); a table too wide for the window scrolls in
// its wrapper instead (style.css).
function setText(el, text) {
  for (const part of String(text).split(/(\s+)/)) {
    if (!part) continue;
    if (/^\s/.test(part)) {
      el.appendChild(document.createTextNode(part));
    } else {
      const token = document.createElement("span");
      token.className = "token";
      token.textContent = part;
      el.appendChild(token);
    }
  }
}

function cell(row, text, className) {
  const td = document.createElement("td");
  setText(td, text === null || text === undefined ? "—" : text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

// A session decides when its rows come and go: one that adds or removes rows above the
// row the owner is about to click (a far machine, a sandbox asking for egress in a loop)
// would put its own button under the pointer at the moment of the click. A button that
// appeared or moved is not clicked by the pointer until it has stayed put this long
// (aria-disabled meanwhile); the keyboard acts on the focused button, which keeps its
// request across updates (see fill), so it is never held back.
const SETTLE_MS = 700;
// Set once another listener answered in the dashboard's place: no button acts any more.
let ended = false;
// A move of a few pixels (a column a little wider when a count grows) puts no other
// button under the pointer: a flood of such changes must not hold every button back.
const JITTER_PX = 4;
// Where each button (by its label, which names its request) was last seen, and since when.
const placed = new Map();
let settleTimer = 0;

// Whether the button has stayed where it is for SETTLE_MS; if it has moved since it was
// last seen, it starts settling again.
function settled(b) {
  const label = b.getAttribute("aria-label");
  const now = performance.now();
  const box = b.getBoundingClientRect();
  // Where it is in the page, not in the window: scrolling the page or a table's wrapper
  // (the owner's own doing, or the browser's to bring the button into view) moves nothing.
  const scroller = b.closest(".scroll");
  const x = box.left + window.scrollX + (scroller ? scroller.scrollLeft : 0);
  const y = box.top + window.scrollY;
  const seen = placed.get(label);
  if (!seen || Math.abs(seen.x - x) > JITTER_PX || Math.abs(seen.y - y) > JITTER_PX) {
    placed.set(label, { x, y, since: now });
    return false;
  }
  return now - seen.since >= SETTLE_MS;
}

// After each update: buttons new or moved are held back until they have settled.
function settle() {
  const labels = new Set();
  let unsettled = false;
  for (const b of document.querySelectorAll("main button")) {
    labels.add(b.getAttribute("aria-label"));
    const ready = settled(b);
    b.setAttribute("aria-disabled", String(!ready));
    unsettled ||= !ready;
  }
  for (const label of placed.keys()) if (!labels.has(label)) placed.delete(label);
  if (unsettled) {
    clearTimeout(settleTimer);
    settleTimer = setTimeout(settle, SETTLE_MS + 50);
  }
}

function button(td, label, title, onClick, danger) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.setAttribute("aria-label", title);
  if (danger) b.className = "danger";
  b.addEventListener("click", (event) => {
    if (ended) {  // its dashboard is gone: nothing goes to whoever listens there now
      say("this dashboard has ended: run `sandbridge ui` again", true);
      return;
    }
    // detail 0: Enter or Space on the focused button, not the pointer.
    if (event.detail !== 0 && (b.getAttribute("aria-disabled") === "true" || !settled(b))) {
      say(`the table just changed under the pointer: "${title}" was not done; click again`, true);
      settle();
      return;
    }
    onClick(event);
  });
  td.appendChild(b);
  return b;
}

// ``done``: the status line once it is done (a text, or a function of the answer);
// ``refusedWith``: a function of a refusal's answer that handles it (true) or leaves it to
// the status line (false).
async function act(body, done, refusedWith) {
  try {
    const answer = await fetch("/api/action", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Sandbridge-CSRF": csrf },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    const result = await answer.json();
    if (result.ok) say(typeof done === "function" ? done(result) : done);
    else if (!(refusedWith && refusedWith(result))) say(`refused: ${result.error}`, true);
  } catch (error) {
    say(`the dashboard did not answer: ${error}`, true);
  }
}

function duration(seconds) {
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

function secondsSince(started) {
  return Math.max(0, Math.round(Date.now() / 1000 - Number(started)));
}

function uptime(seconds) {
  const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

// Re-rendering a table would move keyboard focus away: remember which button had it
// (by its label) and give it back.
function fill(id, rows, render, columns) {
  const body = document.querySelector(`#${id} tbody`);
  const focused = body.contains(document.activeElement)
    ? document.activeElement.getAttribute("aria-label") : null;
  const fresh = document.createElement("tbody");
  for (const item of rows) {
    const row = document.createElement("tr");
    render(row, item);
    fresh.appendChild(row);
  }
  if (!rows.length) {
    const row = document.createElement("tr");
    cell(row, "none", "empty").colSpan = columns;
    fresh.appendChild(row);
  }
  body.replaceWith(fresh);
  if (focused) {
    for (const b of fresh.querySelectorAll("button, a")) {
      if (b.getAttribute("aria-label") === focused) { b.focus(); break; }
    }
  }
}

// A far machine's rows say which machine (the name its `sandbridge connect` gave it);
// this machine's say "here".
function machineCell(row, item) {
  cell(row, item.machine ? item.machine : "here", item.machine ? "far" : "local");
}

// Sessions whose Stop was pressed once: their row asks before anything is sent, since a
// Stop ends the sandbox and everything running in it. Kept across updates until answered
// or the session is gone.
const confirmingStop = new Set();
// The tables last shown: the page re-renders them itself when the owner opens or answers
// a question (no event comes from the dashboard for that).
let shown = null;

// Show the tables again, with the focus on the button labelled ``focusLabel`` if given.
function rerender(focusLabel) {
  if (shown) render(shown);
  if (!focusLabel) return;
  for (const b of document.querySelectorAll("main button")) {
    if (b.getAttribute("aria-label") === focusLabel) { b.focus(); break; }
  }
}

function renderSession(row, s) {
  cell(row, s.id);
  machineCell(row, s);
  cell(row, s.workdir);
  cell(row, s.command);
  // The uptime is counted here, every second (the tables change only on events).
  cell(row, uptime(secondsSince(s.started)), "uptime").dataset.started = String(s.started);
  cell(row, s.network);
  cell(row, s.egress ? `${s.egress.allowed} allowed, ${s.egress.refused} refused` : null);
  cell(row, s.ssh_agent ? `${s.ssh_agent.signed} signed, ${s.ssh_agent.refused} refused` : null);
  cell(row, s.clipboard ? `${s.clipboard.reads} read, ${s.clipboard.writes} written, ${s.clipboard.refused} refused` : null);
  cell(row, s.containers ? `${s.containers.created} created, ${s.containers.allowed} allowed, ${s.containers.refused} refused` : null);
  const td = cell(row, "");
  if (s.controllable && confirmingStop.has(s.id)) {
    const ask = document.createElement("span");
    ask.textContent = "End this session and its sandbox? ";
    td.appendChild(ask);
    button(td, "Yes, stop", `Confirm stop session ${s.id}`, () => {
      confirmingStop.delete(s.id);
      act({ action: "stop", session: s.id }, `stopping ${s.id}`);
    }, true);
    button(td, "Cancel", `Cancel stop session ${s.id}`, () => {
      confirmingStop.delete(s.id);
      say(`${s.id} keeps running`);
      rerender(`Stop session ${s.id}`);
    });
  } else if (s.controllable) {
    button(td, "Stop", `Stop session ${s.id}`, () => {
      confirmingStop.add(s.id);
      rerender(`Confirm stop session ${s.id}`);
    }, true);
  } else if (s.machine) {
    td.textContent = "not from here";
    td.title = String(s.stop_note);
  }
}

// What an app's access means (docs/dashboard.md), beside the word and on hover.
const SHARED_NOTE = "no token: any browser or program of yours with the URL opens it; other users are refused";
const PRIVATE_NOTE = "a one-time token in the URL, then only the browser that used it";

function renderApp(row, a) {
  cell(row, a.session);
  cell(row, a.port);
  cell(row, a.process);
  const urlCell = cell(row, "");
  const code = document.createElement("code");
  setText(code, a.url);
  urlCell.appendChild(code);
  const access = cell(row, a.private ? "private" : "shared");
  access.title = a.private ? PRIVATE_NOTE : SHARED_NOTE;
  const note = document.createElement("span");
  note.className = "note";
  note.textContent = a.private ? ` (${PRIVATE_NOTE})` : ` (${SHARED_NOTE})`;
  access.appendChild(note);
  const td = cell(row, "");
  const link = document.createElement("a");
  link.href = a.url;
  link.target = "_blank";
  link.rel = "noopener noreferrer";
  link.textContent = "Open";
  link.setAttribute("aria-label", `Open ${a.url}`);
  td.appendChild(link);
  td.appendChild(document.createTextNode(" "));
  button(td, "Copy", `Copy ${a.url}`, async () => {
    try { await navigator.clipboard.writeText(a.url); say(`copied ${a.url}`); }
    catch (error) { say(`could not copy: ${error}`, true); }
  });
  if (!a.machine) {  // a far machine's app is closed on that machine
    button(td, "Close", `Close app ${a.session} port ${a.port}`,
      () => act({ action: "app_close", session: a.session, host_port: a.host_port }, `closed ${a.url}`), true);
  }
}

const FINISHED = new Set(["denied", "revoked", "ended"]);

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString();
}

// A finished request shows how and when it ended, never the expiry of an approval that no
// longer holds (a far machine's rows carry no end time: the state alone).
function approvedOrEnded(t) {
  if (FINISHED.has(t.state)) return t.ended ? `${t.state} ${clock(t.ended)}` : t.state;
  return t.expires ? `until ${clock(t.expires)}` : null;
}

function renderTerminal(row, t) {
  cell(row, t.id);
  machineCell(row, t);
  cell(row, t.state);
  const key = cell(row, "");
  const code = document.createElement("code");
  code.textContent = `${String(t.requester).slice(0, 16)}…`;
  code.title = String(t.requester);
  key.appendChild(code);
  cell(row, t.name);
  cell(row, t.reason);
  cell(row, t.duration ? duration(t.duration) : null);
  cell(row, approvedOrEnded(t));
  const td = cell(row, "");
  if (t.state === "pending") {
    // "as asked": the session's own default (the duration asked, else 10 minutes)
    button(td, "Approve", `Approve terminal request ${t.id}`, () => {
      const chosen = document.getElementById("ttl").value;
      // What this row shows goes with it: the session signs nothing else.
      act({ action: "terminal_approve", id: t.id, ttl: chosen ? Number(chosen) : null,
        requester: t.requester, duration: t.duration ?? null },
        (result) => `approved ${t.id} for ${duration(Number(result.ttl))}`);
    });
    button(td, "Deny", `Deny terminal request ${t.id}`, () => act({ action: "terminal_deny", id: t.id }, `denied ${t.id}`), true);
  } else if (t.state === "approved" || t.state === "active") {
    button(td, "Revoke", `Revoke terminal request ${t.id}`, () => act({ action: "terminal_revoke", id: t.id }, `revoked ${t.id}`), true);
  }
}

// Egress requests whose session refused a grant without 'private' (code needs_private:
// the name resolves to non-global addresses only, so the proxy would refuse every
// connection), by "SESSION ID", with the session's words. Only such a row offers the
// grant "as private": a page never sends private before its session asked for it.
const needsPrivate = new Map();

function renderPending(row, p) {
  cell(row, p.session);
  cell(row, p.id);
  cell(row, p.destination);
  cell(row, p.reason);
  const key = `${p.session} ${p.id}`;
  const refusal = needsPrivate.get(key);
  // What approving would let the proxy reach that the destination does not say (an
  // address of this host, a loopback address in another spelling, a wildcard), and
  // what granting it as private lets the proxy do (the session's refusal says both).
  const warnings = [p.caution, refusal].filter(Boolean);
  if (warnings.length) cell(row, `WARNING: ${warnings.join("; ")}`, "caution");
  else cell(row, null);
  const td = cell(row, "");
  const as = refusal ? " as private" : "";
  // What the session granted, in its own answer's words (a private grant says private).
  const granted = (result) => `approved ${p.id}` +
    (result.destination ? `: ${result.destination}, ${result.scope === "once" ? "one connection" : "until the session ends"}` : "") +
    (result.saved ? `; saved to ${result.saved}` : "");
  // The row is drawn again with the session's refusal and the "as private" buttons. The
  // focus goes to Deny, not to the grant: a second Enter must not grant private unread.
  const needed = (result) => {
    if (result.code !== "needs_private") return false;
    needsPrivate.set(key, String(result.error));
    say(`not approved: ${p.id} can only be granted as private (its row says why)`, true);
    rerender(`Deny egress request ${p.id}`);
    return true;
  };
  const approve = (scope, save, label) => button(td, `${label}${as}`, `${label}${as}: egress request ${p.id}`,
    () => act({ action: "egress_approve", session: p.session, id: p.id, scope, save, private: Boolean(refusal) },
      granted, needed));
  approve("once", false, "Allow once");
  approve("session", false, "Allow for the session");
  approve("session", true, "Allow and save");
  button(td, "Deny", `Deny egress request ${p.id}`,
    () => act({ action: "egress_deny", session: p.session, id: p.id }, `denied ${p.id}`), true);
}

// A bridge's question (an ssh-agent signature, a clipboard read): the first answer, here or
// on the session's terminal, wins; no answer by its time is a no (docs/dashboard.md).
function renderQuestion(row, q) {
  cell(row, q.session);
  cell(row, q.kind);
  cell(row, q.text);
  cell(row, clock(q.expires));
  const td = cell(row, "");
  const answered = (yes) => () => act({ action: "question_answer", session: q.session, id: q.id, yes },
    `${yes ? "allowed" : "refused"}: ${q.kind} question ${q.id}`);
  button(td, "Yes", `Yes to question ${q.id} of ${q.session}`, answered(true));
  button(td, "No", `No to question ${q.id} of ${q.session}`, answered(false), true);
}

// A login's callback the host awaits (or awaited) on its loopback: docs/open.md.
function renderLogin(row, l) {
  cell(row, l.session);
  cell(row, l.callback);
  cell(row, l.authorize_host);
  cell(row, l.state);
}

function renderEgress(row, e) {
  cell(row, e.session);
  cell(row, e.decision, e.decision);
  cell(row, e.kind);
  cell(row, e.destination);
  cell(row, e.count);
  cell(row, e.reason);
  const line = cell(row, "");
  if (e.line) {
    const code = document.createElement("code");
    setText(code, e.line);
    line.appendChild(code);
  } else {
    line.textContent = "—";
  }
}

function render(tables) {
  shown = tables;
  const ids = new Set(tables.sessions.map((s) => s.id));
  for (const id of confirmingStop) if (!ids.has(id)) confirmingStop.delete(id);
  const asking = new Set(tables.egress_pending.map((p) => `${p.session} ${p.id}`));
  for (const key of needsPrivate.keys()) if (!asking.has(key)) needsPrivate.delete(key);
  fill("questions", tables.questions || [], renderQuestion, 5);
  fill("sessions", tables.sessions, renderSession, 9);
  fill("apps", tables.apps, renderApp, 6);
  fill("terminals", tables.terminals, renderTerminal, 9);
  fill("logins", tables.logins || [], renderLogin, 4);
  fill("egress-pending", tables.egress_pending, renderPending, 6);
  fill("egress", tables.egress, renderEgress, 7);
  settle();
}

// True until the first update, and again after the stream broke.
let waiting = true;
// The stream proves it is this page's dashboard before its tables are shown: its first
// event says the page's CSRF token. The tab reconnects to the same name and port after a
// break; once the dashboard has ended, another local user may listen there, and would
// otherwise have its rows shown as the owner's.
let proven = false;
const events = new EventSource("/events");
events.addEventListener("open", () => { proven = false; });
events.addEventListener("hello", (event) => { proven = event.data === csrf; });
events.addEventListener("message", (event) => {
  if (!proven) {
    events.close();
    ended = true;
    for (const b of document.querySelectorAll("main button")) b.setAttribute("aria-disabled", "true");
    say("this dashboard has ended (another listener answered in its place): run `sandbridge ui` again", true);
    return;
  }
  render(JSON.parse(event.data));
  if (waiting) { say("live"); waiting = false; }
  document.body.dataset.updated = String(Date.now());
});
events.addEventListener("error", () => {
  if (events.readyState === EventSource.CLOSED) return;
  waiting = true;
  say("connection lost; retrying…", true);
});
setInterval(() => {
  for (const td of document.querySelectorAll("td.uptime")) {
    td.textContent = uptime(secondsSince(td.dataset.started));
  }
}, 1000);
