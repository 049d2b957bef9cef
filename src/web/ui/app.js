// codex-bridge admin view. Plain JavaScript, no framework. Everything it shows
// and does goes through the admin API (/api/gitea-workflow/...) with the
// session cookie; live updates arrive on /api/gitea-workflow/events (SSE).
// Text from the server is only ever set with textContent (never as HTML).
"use strict";

const API = "/api/gitea-workflow";
const GITEA = document.body.dataset.gitea || "";
const TERMINAL = ["succeeded", "succeeded_with_rest_fallback", "failed", "failed_reply", "cancelled",
  "aborted", "timed_out", "ignored", "duplicate", "rejected"];
const STATES = ["received", "queued", "leased", "running", "awaiting_approval", "waiting_user",
  "verifying_reply", "retry_wait", "blocked_workspace", "cancel_requested", "needs_reconciliation"]
  .concat(TERMINAL);

// What the live stream told us last.
const live = { overview: null, actors: null, attention: null };
let current = { view: "overview", arg: null };

// ---------------------------------------------------------------- helpers

/** h("div", {class: "x"}, child, "text", ...) → an element; strings become text. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function requestId() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return "web-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function when(t) {
  if (!t) return "—";
  const d = new Date(t);
  if (isNaN(d)) return t;
  const secs = Math.round((Date.now() - d.getTime()) / 1000);
  const abs = Math.abs(secs);
  let rel;
  if (abs < 60) rel = abs + " s";
  else if (abs < 3600) rel = Math.round(abs / 60) + " min";
  else if (abs < 86400) rel = Math.round(abs / 3600) + " h";
  else rel = Math.round(abs / 86400) + " d";
  return secs >= 0 ? rel + " ago" : "in " + rel;
}

function time(t) {
  return h("time", { datetime: t || "", title: t || "" }, when(t));
}

function toast(text, err) {
  const t = h("div", { class: "toast" + (err ? " err" : ""), role: "status" }, text);
  document.getElementById("toasts").append(t);
  setTimeout(() => t.remove(), 6000);
}

async function api(path, opts) {
  const res = await fetch(API + path, Object.assign({ credentials: "same-origin" }, opts || {}));
  if (res.status === 401) {
    // The session ended (signed out elsewhere, expired, token changed).
    location.reload();
    throw new Error("signed out");
  }
  let body = null;
  try { body = await res.json(); } catch (_) { body = null; }
  if (!res.ok) {
    const e = new Error((body && body.message) || ("HTTP " + res.status));
    e.code = body && body.code;
    e.status = res.status;
    throw e;
  }
  return body;
}

function post(path, body) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

// Health states: a colour and words.
const HEALTH = {
  idle: ["idle", "idle"],
  busy: ["busy", "busy"],
  busy_elsewhere: ["busy", "busy (other instance)"],
  awaiting_approval: ["approval", "waiting for approval"],
  blocked: ["blocked", "blocked"],
  uncertain: ["uncertain", "uncertain"],
  restarting: ["restarting", "restarting"],
  paused: ["approval", "paused"],
  disabled: ["off", "disabled"],
  held: ["blocked", "held: no task may start"],
  agent_unavailable: ["blocked", "waiting for the agent runtime"],
};

function health(status) {
  const [tone, label] = HEALTH[status] || ["off", status || "unknown"];
  return h("span", { class: "badge " + tone, "data-status": status || "" }, label);
}

function stateBadge(state) {
  let tone = "off";
  if (["queued", "received", "retry_wait", "waiting_user"].includes(state)) tone = "idle";
  if (["leased", "running", "verifying_reply", "cancel_requested"].includes(state)) tone = "busy";
  if (state === "awaiting_approval") tone = "approval";
  if (state === "blocked_workspace" || state === "failed_reply" || state === "failed" || state === "timed_out") tone = "blocked";
  if (state === "needs_reconciliation") tone = "uncertain";
  if (state === "succeeded" || state === "succeeded_with_rest_fallback") tone = "idle";
  return h("span", { class: "badge " + tone, "data-state": state }, state.replace(/_/g, " "));
}

function taskLink(id) {
  return h("a", { href: "#task/" + encodeURIComponent(id), class: "mono" }, id);
}

/** default:acme/widgets:issue:17 → Gitea's page of that Issue/PR. */
function giteaLink(resourceKey) {
  const m = /^[^:]+:(.+):(issue|pull):(\d+)$/.exec(resourceKey || "");
  if (!m) return h("span", { class: "mono" }, resourceKey || "—");
  const label = m[1] + (m[2] === "pull" ? " !" : " #") + m[3];
  if (!GITEA) return h("span", {}, label);
  const href = GITEA + "/" + m[1] + "/" + (m[2] === "pull" ? "pulls/" : "issues/") + m[3];
  return h("a", { href, target: "_blank", rel: "noopener noreferrer" }, label);
}

function table(headers, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty || "Nothing here.");
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows)));
}

// ---------------------------------------------------------------- views

function view(...children) {
  const nodes = children.flat().filter((c) => c !== null && c !== undefined && c !== false);
  document.getElementById("view").replaceChildren(...nodes);
}

function renderOverview() {
  const o = live.overview;
  if (!o) return view(h("p", { class: "muted" }, "Waiting for the first update…"));
  const by = o.tasksByState || {};
  const hooks = o.webhooksLastHour || {};
  const hookErrors = Object.entries(hooks)
    .filter(([s]) => !["accepted", "duplicate", "ignored", "recorded"].includes(s))
    .reduce((n, [, c]) => n + c, 0);
  const intake = h("div", { class: "card" + (o.paused ? " warn" : "") },
    h("div", { class: "label" }, "Intake"),
    h("div", { class: "value", id: "intake-status", "data-paused": String(!!o.paused) }, o.paused ? "paused" : "running"),
    o.paused && o.pauseReason ? h("div", { class: "small muted" }, o.pauseReason, o.pausedBy ? " — " + o.pausedBy : "") : null,
    h("div", { class: "card-actions" },
      o.paused
        ? h("button", { id: "resume-intake", class: "primary small", onclick: () => pauseIntake(true) }, "Resume intake")
        : h("button", { id: "pause-intake", class: "small", onclick: () => pauseIntake(false) }, "Pause intake")));
  const card = (label, value, id, cls, href) => h("div", { class: "card" + (cls ? " " + cls : "") },
    h("div", { class: "label" }, label),
    h("div", { class: "value", id }, href ? h("a", { href }, String(value)) : String(value)));
  const states = STATES.filter((s) => by[s]).map((s) =>
    h("tr", {}, h("td", {}, h("a", { href: "#tasks?state=" + s }, stateBadge(s))), h("td", { class: "num" }, by[s])));
  const hookRows = Object.entries(hooks).map(([s, n]) =>
    h("tr", {}, h("td", {}, s), h("td", { class: "num" }, n)));
  view(
    h("h1", {}, "Overview"),
    h("div", { class: "cards" },
      intake,
      card("Queue depth", o.queueDepth, "queue-depth", null, "#tasks?state=queued"),
      card("Running turns", o.running, "running-count", null, "#actors"),
      h("div", { class: "card" + (actionable() ? " bad" : "") },
        h("div", { class: "label" }, "Needs attention"),
        h("div", { class: "value", id: "attention-total" }, h("a", { href: "#attention" }, String(actionable()))),
        failedReplies() ? h("div", { class: "small muted" }, failedReplies() + " failed repl" + (failedReplies() === 1 ? "y" : "ies")) : null),
      card("Repositories", o.repositories, "repo-count"),
      card("Webhook errors (1 h)", hookErrors, "webhook-errors", hookErrors ? "bad" : null)),
    chartsPanel(),
    h("div", { class: "grid2" },
      h("section", { class: "panel" }, h("h2", {}, "Tasks per state"),
        table(["state", "tasks"], states, "No tasks yet.")),
      h("section", { class: "panel" }, h("h2", {}, "Webhooks in the last hour"),
        table(["outcome", "deliveries"], hookRows, "No webhook in the last hour."))),
    catchupLine(o.catchup));
}

// Whether comments whose webhook never arrived are caught up, and what that cannot see.
function catchupLine(c) {
  if (!c) return null;
  const state = c.enabled
    ? "every " + c.intervalSecs + " s over " + c.repositories + " repositor" + (c.repositories === 1 ? "y" : "ies") +
      (c.lastPassAt ? ", last " + when(c.lastPassAt) : "")
    : "off";
  return h("p", { class: "small muted", id: "catchup-line" },
    "Catch-up of missed webhooks: " + state + ". It cannot see " + c.cannotSee + ".");
}

function lane(name, l) {
  return h("span", {}, name + ": ", h("b", {}, l.busy ? "busy" : "free"),
    l.followup ? " (+follow-up)" : "", " · " + l.passes + " passes");
}

/** One repository node of an actor tree, with its session actors. */
function repoNode(r) {
  const [tone] = HEALTH[r.status] || ["off"];
  const disabled = r.status === "disabled";
  return h("li", { class: "repo", "data-repo": r.repoKey, "data-tone": tone },
    h("div", { class: "node-head" },
      h("span", { class: "name" }, r.repoKey), health(r.status),
      r.runningTask ? h("span", { class: "small" }, "running ", taskLink(r.runningTask)) : null,
      h("span", { class: "spacer" }),
      h("a", { href: "#tasks?repo=" + encodeURIComponent(r.repoKey), class: "small" }, "tasks"),
      h("button", { class: "small" + (disabled ? "" : " danger"), onclick: () => repoAction(r.repoKey, !disabled) },
        disabled ? "Enable" : "Disable")),
    h("div", { class: "facts" },
      h("span", {}, "lease: ", h("b", {}, r.leaseHolder || "none"),
        r.leaseExpiresAt ? h("span", {}, " · expires ", time(r.leaseExpiresAt)) : null),
      h("span", {}, "queue: ", h("b", { class: "queue-depth" }, r.queueDepth)),
      h("span", {}, "mailbox: ", h("b", {}, r.mailboxBacklog)),
      h("span", {}, "restarts: ", h("b", {}, r.restarts)),
      h("span", {}, "last event: ", time(r.lastEventAt)),
      hookFact(r.repoKey)),
    r.lastError ? h("div", { class: "error-text" }, r.lastError) : null,
    h("ul", { class: "sessions" }, (r.sessions || []).map((s) =>
      h("li", { class: "session", "data-session": s.sessionKey },
        h("div", { class: "node-head" },
          giteaLink(s.sessionKey), health(s.status),
          s.activeTask ? h("span", { class: "small" }, "task ", taskLink(s.activeTask)) : null,
          s.activeTurn ? h("span", { class: "small mono hide-narrow" }, "turn " + s.activeTurn) : null),
        h("div", { class: "facts" },
          lane("normal lane", s.normalLane || {}),
          lane("steer lane", s.steerLane || {}),
          lane("command lane", s.commandLane || {}),
          h("span", {}, "outbox: ", h("b", {}, s.outboxDepth)),
          h("span", {}, "mailbox: ", h("b", {}, s.mailboxBacklog)),
          h("span", {}, "restarts: ", h("b", {}, s.restarts)),
          h("span", {}, "last event: ", time(s.lastEventAt))),
        s.lastError ? h("div", { class: "error-text" }, s.lastError) : null))));
}

/** Another server process's tree, as its last heartbeat reported it. */
function instanceTree(i) {
  const repos = i.repositories || [];
  return h("section", { class: "instance", "data-server": i.serverId },
    h("div", { class: "panel registry" },
      h("strong", {}, "Instance"),
      h("span", { class: "small mono" }, i.serverId),
      i.draining ? health("draining") : null,
      h("span", { class: "small" }, "heartbeat: ", time(i.heartbeatAt)),
      h("span", { class: "small" }, "actors as of: ", time(i.actorsAt))),
    repos.length ? h("ul", { class: "tree" }, repos.map(repoNode))
      : h("p", { class: "empty" }, i.actorsAt ? "No repository actor there."
        : "It reports no actors (intake only, or not yet)."));
}

function renderActors() {
  const a = live.actors;
  if (!a) return view(h("p", { class: "muted" }, "Waiting for the first update…"));
  const reg = a.registry;
  const repos = (a.repositories || []).map(repoNode);
  view(
    h("h1", {}, "Actors"),
    h("section", { class: "panel registry", id: "registry" },
      h("strong", {}, "Registry"),
      h("span", { class: "small" }, "runtime: ", h("b", {}, reg.runtime)),
      h("span", { class: "small" }, "repository actors: ", h("b", {}, reg.repoActors)),
      h("span", { class: "small" }, "session actors: ", h("b", {}, reg.sessionActors)),
      reg.owner ? h("span", { class: "small mono muted hide-narrow" }, reg.owner) : null),
    repos.length ? h("ul", { class: "tree", id: "tree" }, repos)
      : h("p", { class: "empty", id: "tree" }, "No repository actor yet: they start when work arrives."),
    h("div", { id: "instances" }, (a.instances || []).map(instanceTree)));
}

function parseQuery(s) {
  const q = {};
  for (const [k, v] of new URLSearchParams(s || "")) q[k] = v;
  return q;
}

async function renderTasks(query, cursor, append) {
  const q = parseQuery(query);
  const params = new URLSearchParams();
  if (q.repo) params.set("repoKey", q.repo);
  if (q.resource) params.set("resourceKey", q.resource);
  if (q.state) params.set("state", q.state);
  params.set("limit", "50");
  if (cursor) params.set("cursor", cursor);
  let page;
  try { page = await api("/tasks?" + params); } catch (e) { return view(h("p", { class: "result err" }, e.message)); }
  if (current.view !== "tasks" || current.arg !== query) return;
  const rows = page.tasks.map((t) => h("tr", { "data-task": t.taskId },
    h("td", {}, taskLink(t.taskId)),
    h("td", {}, giteaLink(t.resourceKey)),
    h("td", {}, stateBadge(t.state), t.errorCode ? h("div", { class: "small error-text" }, t.errorCode) : null),
    h("td", { class: "num hide-narrow" }, t.attempt),
    h("td", { class: "hide-narrow" }, t.author || "—"),
    h("td", {}, time(t.updatedAt))));
  if (append) {
    const body = document.querySelector("#task-table tbody");
    if (body) body.append(...rows);
  } else {
    const trees = live.actors ? [live.actors].concat(live.actors.instances || []) : [];
    const repos = [...new Set(trees.flatMap((t) => (t.repositories || []).map((r) => r.repoKey)))];
    const repoInput = h("input", { id: "f-repo", list: "repo-list", value: q.repo || "", placeholder: "default:owner/name" });
    const resInput = h("input", { id: "f-resource", value: q.resource || "", placeholder: "default:owner/name:issue:1" });
    const stateSel = h("select", { id: "f-state" }, h("option", { value: "" }, "any"),
      STATES.map((s) => h("option", { value: s, selected: s === q.state }, s)));
    const form = h("form", { class: "filters panel", onsubmit: (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      if (repoInput.value.trim()) p.set("repo", repoInput.value.trim());
      if (resInput.value.trim()) p.set("resource", resInput.value.trim());
      if (stateSel.value) p.set("state", stateSel.value);
      location.hash = "#tasks" + (p.toString() ? "?" + p : "");
    } },
    h("div", {}, h("label", { for: "f-repo" }, "Repository"), repoInput,
      h("datalist", { id: "repo-list" }, repos.map((r) => h("option", { value: r })))),
    h("div", {}, h("label", { for: "f-resource" }, "Issue/PR"), resInput),
    h("div", {}, h("label", { for: "f-state" }, "State"), stateSel),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Filter")),
    h("div", {}, h("a", { href: "#tasks", class: "small" }, "clear")));
    view(h("h1", {}, "Tasks"), form,
      h("section", { class: "panel" },
        rows.length ? h("div", { class: "table-wrap" }, h("table", { id: "task-table" },
          h("thead", {}, h("tr", {}, ["task", "Issue/PR", "state", "attempt", "author", "updated"].map((x, i) =>
            h("th", { class: i === 3 || i === 4 ? "hide-narrow" : null }, x)))),
          h("tbody", {}, rows))) : h("p", { class: "empty" }, "No task matches."),
        h("div", { id: "more" })));
  }
  const more = document.getElementById("more");
  if (more) {
    more.replaceChildren(...(page.nextCursor
      ? [h("button", { onclick: () => renderTasks(query, page.nextCursor, true) }, "Older tasks")]
      : []));
  }
}

async function renderTask(id) {
  let d;
  try { d = await api("/tasks/" + encodeURIComponent(id)); } catch (e) {
    return view(h("p", { class: "result err" }, e.message));
  }
  if (current.view !== "task" || current.arg !== id) return;
  const t = d.task;
  const buttons = [];
  if (["queued", "waiting_user", "blocked_workspace"].includes(t.state))
    buttons.push(h("button", { id: "task-cancel", onclick: () => taskAction("cancel", t.taskId) }, "Cancel"));
  if (["leased", "running", "awaiting_approval"].includes(t.state))
    buttons.push(h("button", { id: "task-abort", class: "danger", onclick: () => taskAction("abort", t.taskId) }, "Abort"));
  if (t.state === "needs_reconciliation")
    buttons.push(h("button", { id: "task-reconcile", class: "primary", onclick: () => reconcile(t.taskId) }, "Reconcile…"));
  if (t.state === "blocked_workspace")
    buttons.push(h("button", { id: "task-clear", class: "primary", onclick: () => taskAction("clear-workspace", t.taskId) }, "Clear workspace…"));
  const facts = [
    ["Issue/PR", giteaLink(t.resourceKey)], ["repository", t.repoKey], ["author", t.author || "—"],
    ["attempt", t.attempt], ["reply attempt", t.replyAttempt], ["thread", t.threadId || "—"], ["turn", t.turnId || "—"],
    ["error", t.errorCode || "—"], ["created", time(t.createdAt)], ["updated", time(t.updatedAt)],
    ["session", h("a", { href: "#session/" + encodeURIComponent(t.sessionKey), id: "session-link" }, "all turns")],
  ];
  if (t.workflowId) {
    facts.push(["workflow", h("a", { href: "#workflow/" + encodeURIComponent(t.workflowId), id: "workflow-link" },
      t.continuation === null || t.continuation === undefined ? "its workflow" : "continuation #" + t.continuation + " of its workflow")]);
  }
  const transitions = (d.transitions || []).map((x) => h("li", {},
    h("div", {}, x.from ? stateBadge(x.from) : "—", " → ", stateBadge(x.to)),
    h("div", { class: "when" }, time(x.at), " · ", x.actor, x.reason ? " · " + x.reason : "",
      x.errorCode ? " · " + x.errorCode : "")));
  const approvals = (d.approvals || []).map((a) => h("tr", { "data-approval": a.approvalId },
    h("td", {}, a.kind), h("td", {}, a.status), h("td", {}, a.decision || "—", a.decidedBy ? " by " + a.decidedBy : ""),
    h("td", {}, time(a.createdAt)),
    h("td", {}, a.status === "pending" ? h("div", { class: "actions" },
      h("button", { class: "small primary approve", onclick: () => decide(a, true) }, "Approve"),
      h("button", { class: "small danger deny", onclick: () => decide(a, false) }, "Deny")) : null)));
  const comments = (d.comments || []).map((c) => h("tr", {},
    h("td", {}, c.kind), h("td", {}, c.status),
    h("td", {}, c.htmlUrl && /^https?:\/\//i.test(c.htmlUrl) ? h("a", { href: c.htmlUrl, target: "_blank", rel: "noopener noreferrer" },
      c.commentId ? "comment " + c.commentId : "open in Gitea") : (c.commentId ? "comment " + c.commentId : "—")),
    h("td", {}, time(c.updatedAt))));
  const turns = (d.turns || []).map((x) => h("tr", {},
    h("td", { class: "mono" }, x.turnId), h("td", {}, x.kind), h("td", {}, x.status),
    h("td", {}, time(x.startedAt)), h("td", {}, time(x.completedAt))));
  const attempts = (d.attempts || []).map((a) => h("tr", {},
    h("td", {}, "#" + a.number), h("td", { class: "mono" }, a.attemptId), h("td", {}, a.status),
    h("td", {}, a.outcome || "—"), h("td", { class: "hide-narrow" }, a.owner || "—"), h("td", {}, time(a.startedAt))));
  const ledger = (d.ledger || []).map((l) => h("tr", {},
    Object.entries(l).slice(0, 6).map(([k, v]) => h("td", { class: "small" }, h("span", { class: "muted" }, k + ": "),
      v === null ? "—" : String(v)))));
  const audit = (d.audit || []).map((e) => h("tr", {},
    h("td", {}, h("code", {}, e.action)), h("td", {}, e.actor),
    h("td", {}, e.toState ? (e.fromState || "—") + " → " + e.toState : ""),
    h("td", { class: "small" }, (e.metadata && e.metadata.reason) || e.errorCode || ""),
    h("td", {}, time(e.timestamp))));
  view(
    h("p", {}, h("a", { href: "#tasks" }, "← tasks")),
    h("h1", {}, "Task ", h("span", { class: "mono" }, t.taskId), " ", stateBadge(t.state)),
    buttons.length ? h("div", { class: "actions", id: "task-actions" }, buttons) : null,
    h("section", { class: "panel" }, h("div", { class: "facts" },
      facts.map(([k, v]) => h("span", {}, k + ": ", h("b", {}, v))))),
    h("div", { class: "grid2" },
      h("section", { class: "panel" }, h("h2", {}, "Timeline"), h("ol", { class: "timeline", id: "timeline" }, transitions)),
      h("section", { class: "panel" }, h("h2", {}, "Approvals"),
        table(["kind", "status", "decision", "asked", ""], approvals, "No approval asked."),
        h("h2", {}, "Replies and receipts"),
        table(["kind", "status", "Gitea", "updated"], comments, "No comment written yet."))),
    h("section", { class: "panel" }, h("h2", {}, "Attempts"),
      table(["#", "attempt", "status", "outcome", "owner", "started"], attempts, "No attempt yet.")),
    h("section", { class: "panel" }, h("h2", {}, "Turns"),
      table(["turn", "kind", "status", "started", "completed"], turns, "No turn yet.")),
    transcriptSection(t.taskId),
    ledger.length ? h("section", { class: "panel" }, h("h2", {}, "Ledger"), table([], ledger)) : null,
    h("section", { class: "panel" }, h("h2", {}, "Audit events"),
      table(["action", "actor", "state", "reason", "at"], audit, "No audit event.")));
}

function renderAttention() {
  const a = live.attention;
  const o = live.overview;
  if (!a) return view(h("p", { class: "muted" }, "Waiting for the first update…"));
  const byState = (s) => a.tasks.filter((t) => t.state === s);
  const row = (t, ...actions) => h("tr", { "data-task": t.taskId },
    h("td", {}, taskLink(t.taskId)), h("td", {}, giteaLink(t.resourceKey)),
    h("td", {}, t.errorCode || "—"), h("td", {}, time(t.updatedAt)),
    h("td", {}, h("div", { class: "actions" }, actions)));
  const approvals = a.approvals.map((p) => h("tr", { "data-approval": p.approvalId },
    h("td", {}, taskLink(p.taskId)), h("td", {}, p.kind.replace(/_/g, " ")),
    h("td", { class: "mono small" }, approvalSummary(p)), h("td", {}, time(p.createdAt)),
    h("td", {}, h("div", { class: "actions" },
      h("button", { class: "small primary approve", onclick: () => decide(p, true) }, "Approve"),
      h("button", { class: "small danger deny", onclick: () => decide(p, false) }, "Deny")))));
  const heads = ["task", "Issue/PR", "error", "since", ""];
  view(
    h("h1", {}, "Needs attention"),
    h("section", { class: "panel" }, h("h2", {}, "Intake"),
      h("p", {}, o && o.paused ? "Intake is paused" + (o.pauseReason ? ": " + o.pauseReason : ".") : "Intake is running. "),
      o && o.paused
        ? h("button", { class: "primary", onclick: () => pauseIntake(true) }, "Resume intake")
        : h("button", { onclick: () => pauseIntake(false) }, "Pause intake")),
    h("section", { class: "panel", id: "pending-approvals" }, h("h2", {}, "Pending approvals (", a.approvals.length, ")"),
      table(["task", "request", "what", "asked", ""], approvals, "No approval waiting.")),
    h("section", { class: "panel", id: "needs-reconciliation" },
      h("h2", {}, "Needs reconciliation (", byState("needs_reconciliation").length, ")"),
      h("p", { class: "small muted" }, "The bridge cannot know whether these turns ran; each blocks its repository until decided."),
      table(heads, byState("needs_reconciliation").map((t) => row(t,
        h("button", { class: "small primary reconcile", onclick: () => reconcile(t.taskId) }, "Reconcile…"))), "None.")),
    h("section", { class: "panel", id: "blocked-workspace" },
      h("h2", {}, "Blocked workspace (", byState("blocked_workspace").length, ")"),
      table(heads, byState("blocked_workspace").map((t) => row(t,
        h("button", { class: "small primary clear", onclick: () => taskAction("clear-workspace", t.taskId) }, "Clear…"),
        h("button", { class: "small cancel", onclick: () => taskAction("cancel", t.taskId) }, "Cancel…"))), "None.")),
    h("section", { class: "panel", id: "failed-reply" },
      h("h2", {}, "Failed reply (", byState("failed_reply").length, ")"),
      h("p", { class: "small muted" }, "The turn finished but its reply could not be confirmed in Gitea: check the Issue/PR."),
      table(heads, byState("failed_reply").map((t) => row(t)), "None.")));
}

// ---------------------------------------------------------------- routing

function route() {
  const hash = location.hash.replace(/^#/, "") || "overview";
  const [path, query] = hash.split("?");
  if (path.startsWith("task/")) current = { view: "task", arg: decodeURIComponent(path.slice(5)) };
  else if (path.startsWith("session/")) current = { view: "session", arg: decodeURIComponent(path.slice(8)) };
  else if (path === "tasks") current = { view: "tasks", arg: query || "" };
  else if (path.startsWith("workflow/")) current = { view: "workflow", arg: decodeURIComponent(path.slice(9)) };
  else if (path === "workflows") current = { view: "workflows", arg: query || "" };
  else if (["overview", "actors", "attention", "workers"].includes(path)) current = { view: path, arg: null };
  else current = { view: "overview", arg: null };
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.view === current.view ||
      (["task", "session"].includes(current.view) && a.dataset.view === "tasks") ||
      (current.view === "workflow" && a.dataset.view === "workflows"));
  }
  render();
}

function render() {
  switch (current.view) {
    case "actors": return renderActors();
    case "tasks": return renderTasks(current.arg);
    case "task": return renderTask(current.arg);
    case "session": return renderSession(current.arg);
    case "workflows": return renderWorkflows(current.arg);
    case "workflow": return renderWorkflow(current.arg);
    case "attention": return renderAttention();
    case "workers": return renderWorkers();
    default: return renderOverview();
  }
}

/** After an action or a live `task`/`audit` event: what is shown may have changed. */
let refreshTimer = null;
function refresh() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    // Do not pull a page out from under an open dialog or a filter being typed in.
    if (document.getElementById("action").open) return;
    const focused = document.activeElement;
    if (focused && focused.closest && focused.closest("#view form")) return;
    if (current.view === "tasks" || current.view === "task" || showsWorkflows()) render();
  }, 300);
}

/** Items a person can act on: uncertain and blocked tasks, pending approvals. */
function actionable() {
  const a = live.attention;
  return a ? a.tasks.filter((t) => t.state !== "failed_reply").length + a.approvals.length : 0;
}

function failedReplies() {
  const a = live.attention;
  return a ? a.tasks.filter((t) => t.state === "failed_reply").length : 0;
}

function updateBadges() {
  const n = actionable();
  const c = document.getElementById("attention-count");
  c.hidden = n === 0;
  c.textContent = String(n);
  updateBanner(live.overview);
}

// The banner on every page: why no task runs now (each blocker with what to
// do), and a paused intake. It goes as soon as the overview says it is fixed.
function updateBanner(o) {
  const banner = document.getElementById("banner");
  const blockers = (o && o.blockers) || [];
  const lines = blockers.map((b) =>
    h("p", { class: "banner-item", "data-code": b.code },
      h("b", { class: "banner-reason" }, b.message),
      b.action ? h("span", { class: "banner-action" }, " What to do: " + b.action) : null));
  if (o && o.paused) {
    lines.push(h("p", { class: "banner-item", "data-code": "paused" },
      "Intake is paused" + (o.pauseReason ? ": " + o.pauseReason : "") + " — new tasks wait in the queue."));
  }
  banner.hidden = lines.length === 0;
  banner.className = "banner" + (blockers.length ? " bad" : "");
  banner.replaceChildren(...lines);
}

function connect() {
  const indicator = document.getElementById("live");
  const es = new EventSource(API + "/events");
  const onDoc = (name) => (ev) => {
    live[name] = JSON.parse(ev.data);
    updateBadges();
    const dialogOpen = document.getElementById("action").open;
    if (current.view === name || (name === "attention" && current.view === "overview") ||
        (name === "overview" && current.view === "attention")) {
      if (!dialogOpen) render();
    }
  };
  es.addEventListener("open", () => { indicator.className = "live on"; indicator.textContent = "live"; });
  es.addEventListener("overview", onDoc("overview"));
  es.addEventListener("actors", onDoc("actors"));
  es.addEventListener("attention", onDoc("attention"));
  es.addEventListener("stats", (ev) => chartsUpdate(JSON.parse(ev.data)));
  es.addEventListener("task", (ev) => {
    const t = JSON.parse(ev.data);
    // A workflow moves on with its tasks (a continuation, a gate, its end).
    if (current.view === "tasks" || (current.view === "task" && current.arg === t.taskId) || showsWorkflows()) refresh();
  });
  es.addEventListener("audit", (ev) => {
    const e = JSON.parse(ev.data);
    if ((current.view === "task" && current.arg === e.taskId) ||
        (showsWorkflows() && String(e.action).startsWith("workflow."))) refresh();
  });
  es.addEventListener("resync", () => refresh());
  es.addEventListener("error", () => {
    indicator.className = "live off";
    indicator.textContent = "reconnecting…";
    if (es.readyState === EventSource.CLOSED) {
      // Refused (e.g. signed out): find out why, then try again.
      api("/overview").catch(() => {}).finally(() => setTimeout(connect, 3000));
    }
  });
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  // Live updates are held back while a dialog is open; show them once it closes.
  document.getElementById("action").addEventListener("close", () => render());
  route();
  connect();
  // Relative times ("3 min ago") age; re-render what is static-ish every 30 s.
  setInterval(() => { if (!document.getElementById("action").open &&
    ["overview", "actors", "attention"].includes(current.view)) render(); }, 30000);
});
