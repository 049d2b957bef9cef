// codex-bridge admin view: workflows, the work of a session that outlives a
// turn. `#workflows` lists them newest first (optionally of one session);
// `#workflow/<id>` shows one: its facts, the gates where it waits for its
// owner, the tasks that were its turns, and the controls (cancel it, answer
// its gate for the owner; both in actions.js). Loaded after app.js and built
// with its helpers (h, api, time, view, table, stateBadge, taskLink,
// giteaLink, current). Text from the server only ever goes in as text.
"use strict";

// Workflow states: a badge colour. Open and waiting for a child are work
// going on; waiting for the owner needs a person, like an approval.
const WORKFLOW_TONES = {
  open: "busy",
  waiting_owner: "approval",
  waiting_child: "busy",
  completed: "idle",
  cancelled: "off",
  failed: "blocked",
};

// The states a workflow can still be cancelled in (the others are ends).
const WORKFLOW_LIVE = ["open", "waiting_owner", "waiting_child"];

function workflowBadge(state) {
  const s = state || "unknown";
  return h("span", { class: "badge " + (WORKFLOW_TONES[s] || "off"), "data-state": s }, s.replace(/_/g, " "));
}

// Why an open workflow waits to continue (the model's provider turned its
// last turn away for capacity), and until when; nothing when it does not.
function waitNote(w) {
  if (!w.waitReason) return null;
  return h("span", { class: "wf-wait small muted" },
    " waits: " + w.waitReason.replace(/_/g, " ") + ", until ", time(w.waitUntil));
}

// Gate statuses: open waits for the owner; resumed was answered; closed
// ended with its workflow.
function gateBadge(status) {
  const tone = { open: "approval", resumed: "idle", closed: "off" }[status] || "off";
  return h("span", { class: "badge " + tone, "data-status": status || "" }, status || "unknown");
}

function workflowLink(id, label) {
  return h("a", { href: "#workflow/" + encodeURIComponent(id), class: label ? null : "mono" }, label || id);
}

/** A workflow's title as a link to its page; one without a title shows its id. */
function workflowTitle(w) {
  return workflowLink(w.workflowId, w.title && w.title.trim() ? w.title : null);
}

/** The session of a workflow: its Issue/PR in Gitea, and its key in full. */
function sessionCell(key) {
  return h("span", {}, giteaLink(key), " ",
    h("a", { href: "#workflows?session=" + encodeURIComponent(key), class: "small mono", title: "workflows of this session" }, key));
}

/** Whether the view shows workflows, so that their live changes re-render it. */
function showsWorkflows() {
  return current.view === "workflows" || current.view === "workflow";
}

// ---------------------------------------------------------------- the list

/** Pages the operator added with "Older workflows" to the list shown: a live
 * refresh draws the list again and adds as many, so they do not vanish. */
let workflowPages = { query: null, appended: 0 };

/** `#workflows[?session=<key>][&limit=<n>]`: newest first; `cursor` appends
 * the next page. Resolves to the page's `nextCursor`. */
async function renderWorkflows(query, cursor, append) {
  const q = parseQuery(query);
  const params = new URLSearchParams();
  if (q.session) params.set("sessionKey", q.session);
  // A page size in the hash (`#workflows?limit=20`) passes through; the server's default is 50.
  if (q.limit) params.set("limit", q.limit);
  if (cursor) params.set("cursor", cursor);
  let page;
  try { page = await api("/workflows" + (params.toString() ? "?" + params : "")); } catch (e) {
    if (append) { toast(e.message, true); return; }
    return view(h("h1", {}, "Workflows"), h("p", { class: "result err", id: "workflows-error" }, e.message));
  }
  if (current.view !== "workflows" || current.arg !== query) return;
  const rows = page.workflows.map((w) => h("tr", { "data-workflow": w.workflowId, "data-state": w.state },
    h("td", {}, workflowBadge(w.state), waitNote(w)),
    h("td", { class: "wf-title" }, workflowTitle(w)),
    h("td", { class: "wf-owner" }, w.owner || "—"),
    h("td", { class: "num wf-continuations" }, String(w.continuations)),
    h("td", { class: "num wf-idle hide-narrow" }, String(w.idleFinals)),
    h("td", {}, time(w.updatedAt)),
    h("td", { class: "hide-narrow" }, sessionCell(w.sessionKey))));
  if (append) {
    const body = document.querySelector("#workflow-table tbody");
    if (body) body.append(...rows);
    workflowPages = { query, appended: (workflowPages.query === query ? workflowPages.appended : 0) + 1 };
  } else {
    const input = h("input", { id: "wf-session", value: q.session || "", placeholder: "default:owner/repo:issue:1", size: 34 });
    const form = h("form", { class: "filters panel", onsubmit: (ev) => {
      ev.preventDefault();
      const key = input.value.trim();
      location.hash = "#workflows" + (key ? "?session=" + encodeURIComponent(key) : "");
    } },
    h("div", {}, h("label", { for: "wf-session" }, "Session (Issue/PR key)"), input),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Filter")),
    h("div", {}, h("a", { href: "#workflows", class: "small" }, "clear")));
    const heads = ["state", "title", "owner", "continuations", "idle finals", "updated", "session"];
    const headClass = ["", "", "", "num", "num hide-narrow", "", "hide-narrow"];
    view(h("h1", {}, "Workflows"), form,
      h("section", { class: "panel" },
        h("p", { class: "small muted" },
          "A workflow is the work of one Issue/PR that goes on across turns: continuations carry it on, " +
          "and a gate makes it wait for its owner."),
        rows.length ? h("div", { class: "table-wrap" }, h("table", { id: "workflow-table" },
          h("thead", {}, h("tr", {}, heads.map((x, i) =>
            h("th", { class: headClass[i] || null }, x)))),
          h("tbody", {}, rows))) : h("p", { class: "empty", id: "workflows-empty" }, "No workflow yet."),
        h("div", { id: "workflows-more" })));
  }
  const more = document.getElementById("workflows-more");
  if (more) {
    more.replaceChildren(...(page.nextCursor
      ? [h("button", { id: "workflows-more-button", onclick: () => renderWorkflows(query, page.nextCursor, true) }, "Older workflows")]
      : []));
  }
  if (!append && workflowPages.query === query && workflowPages.appended > 0) {
    let pages = workflowPages.appended;
    workflowPages = { query, appended: 0 };
    for (let next = page.nextCursor; next && pages > 0; pages -= 1) {
      next = await renderWorkflows(query, next, true);
    }
  }
  return page.nextCursor;
}

// ---------------------------------------------------------------- one workflow

/** `#workflow/<id>`. */
async function renderWorkflow(id) {
  let d;
  try { d = await api("/workflows/" + encodeURIComponent(id)); } catch (e) {
    return view(h("p", {}, h("a", { href: "#workflows" }, "← workflows")),
      h("p", { class: "result err", id: "workflow-error" }, e.message));
  }
  if (current.view !== "workflow" || current.arg !== id) return;
  const w = d.workflow;
  const buttons = [];
  if (WORKFLOW_LIVE.includes(w.state)) {
    buttons.push(h("button", { id: "workflow-cancel", class: "danger", onclick: () => cancelWorkflow(w) }, "Cancel workflow"));
  }
  const facts = [
    ["workflow", h("span", { class: "mono" }, w.workflowId)],
    ["Issue/PR", giteaLink(w.sessionKey)],
    ["session", h("span", {}, h("span", { class: "mono" }, w.sessionKey), " · ",
      h("a", { href: "#session/" + encodeURIComponent(w.sessionKey) }, "turns"), " · ",
      h("a", { href: "#workflows?session=" + encodeURIComponent(w.sessionKey) }, "workflows"))],
    ["owner", h("span", { id: "workflow-owner" }, w.owner || "—")],
    ["continuations", h("span", { id: "workflow-continuations" }, String(w.continuations))],
    ["idle finals", h("span", { id: "workflow-idle-finals" }, String(w.idleFinals))],
    ["waits for", w.waitReason ? h("span", { id: "workflow-wait" }, waitNote(w)) : "—"],
    ["version", String(w.version)],
    ["parent", w.parentWorkflowId ? workflowLink(w.parentWorkflowId) : "—"],
    ["end", w.endCode || "—"],
    ["ended by", w.endedByTask ? taskLink(w.endedByTask) : "—"],
    ["created", time(w.createdAt)],
    ["updated", time(w.updatedAt)],
  ];
  const gates = (d.gates || []).map((g) => h("tr", { "data-gate": g.gateId, "data-status": g.status },
    h("td", { class: "gate-question" }, g.question || "—"),
    h("td", {}, (g.kind || "").replace(/_/g, " ")),
    h("td", {}, gateBadge(g.status)),
    h("td", { class: "hide-narrow" }, g.openedByTask ? taskLink(g.openedByTask) : "—"),
    h("td", { class: "gate-resumed-by" }, g.resumedBy || "—",
      g.resumedByTask ? h("span", {}, " in ", taskLink(g.resumedByTask)) : null),
    h("td", {}, time(g.createdAt)),
    h("td", {}, g.status === "open" && WORKFLOW_LIVE.includes(w.state)
      ? h("button", { class: "small primary answer-gate", onclick: () => answerGate(w, g) }, "Answer gate for the owner")
      : null)));
  const turns = (d.turns || []).map((t) => h("tr", { "data-task": t.taskId },
    h("td", {}, taskLink(t.taskId)),
    h("td", {}, t.continuation === null || t.continuation === undefined ? "comment" : "continuation #" + t.continuation),
    h("td", {}, t.author || "—"),
    h("td", {}, stateBadge(t.state)),
    h("td", {}, t.errorCode || "—"),
    h("td", { class: "mono small hide-narrow" }, t.turnId || "—"),
    h("td", {}, time(t.createdAt)),
    h("td", {}, time(t.updatedAt))));
  const children = (d.children || []).map((c) => h("tr", { "data-workflow": c.workflowId, "data-state": c.state },
    h("td", {}, workflowBadge(c.state)), h("td", {}, workflowLink(c.workflowId, c.title || c.workflowId)),
    h("td", {}, c.childMode || "—"),
    h("td", { class: "mono small child-thread" }, c.threadId || "—",
      c.forkedFromThread ? h("div", { class: "small" }, "forked from " + c.forkedFromThread) : null),
    h("td", { class: "mono small child-worktree" }, c.worktree, h("br", {}), c.branch),
    h("td", {}, String((c.turns || []).length), c.recovered ? " (" + c.recovered + " recovery)" : ""),
    h("td", {}, c.endCode || "—"),
    h("td", {}, time(c.updatedAt)),
    h("td", {}, WORKFLOW_LIVE.includes(c.state)
      ? h("button", { class: "small danger cancel-child", onclick: () => cancelWorkflow(c) }, "Cancel child")
      : null)));
  const results = (d.results || []).map((r) => h("tr", { "data-result": r.resultId, "data-delivery": r.delivery.state },
    h("td", { class: "mono small" }, r.resultId),
    h("td", {}, workflowLink(r.childWorkflowId, "child")),
    h("td", { class: "result-summary" }, r.incomplete ? h("b", {}, "incomplete: ") : null, r.summary,
      (r.blockers || []).length ? h("div", { class: "small" }, "blockers: " + r.blockers.join("; ")) : null),
    h("td", {}, h("span", { class: "badge delivery-state" }, r.delivery.state)),
    h("td", {}, String(r.delivery.deliveries)),
    h("td", {}, r.delivery.ackedByTask ? taskLink(r.delivery.ackedByTask) : "—"),
    h("td", {}, time(r.recordedAt))));
  view(
    h("p", {}, h("a", { href: "#workflows" }, "← workflows")),
    h("h1", {}, "Workflow ", h("span", { id: "workflow-title" }, w.title || w.workflowId), " ",
      h("span", { id: "workflow-state" }, workflowBadge(w.state))),
    buttons.length ? h("div", { class: "actions", id: "workflow-actions" }, buttons) : null,
    h("section", { class: "panel" },
      h("div", { class: "facts", id: "workflow-facts" }, facts.map(([k, v]) => h("span", {}, k + ": ", h("b", {}, v)))),
      w.summary ? h("p", { id: "workflow-summary" }, w.summary) : null),
    h("section", { class: "panel", id: "workflow-gates" }, h("h2", {}, "Gates"),
      h("p", { class: "small muted" },
        "Where the workflow waited for its owner. Answering a gate for the owner lets the work go on: " +
        "your reason is the answer the agent is given."),
      table(["question", "kind", "status", "opened by", "resumed by", "asked", ""], gates, "No gate asked.")),
    h("section", { class: "panel", id: "workflow-turns" }, h("h2", {}, "Turns"),
      table(["task", "input", "author", "state", "error", "turn", "created", "updated"], turns, "No turn yet.")),
    children.length ? h("section", { class: "panel", id: "workflow-children" }, h("h2", {}, "Child workflows"),
      h("p", { class: "small muted" },
        "Delegated work, each in its own thread and worktree. Cancelling a child gives this workflow an incomplete result that says so."),
      table(["state", "title", "mode", "thread", "worktree", "turns", "end", "updated", ""], children)) : null,
    results.length ? h("section", { class: "panel", id: "workflow-results" }, h("h2", {}, "Results"),
      h("p", { class: "small muted" },
        "Each child's result and its delivery to this workflow: carried to its turns until acknowledged."),
      table(["result", "from", "summary", "delivery", "carried", "acknowledged in", "recorded"], results)) : null);
}
