// codex-bridge admin view: a task's transcript (what the agent did in its
// turns) and a session's turns across its tasks. Loaded after app.js and built
// with its helpers (h, api, time, view, taskLink, giteaLink, current). Every
// text from the server goes in as a text node: a comment, a command's output
// or a diff that holds markup shows as that markup, never runs.
"use strict";

/** "1 234" tokens of a turn, with the breakdown in words. */
function tokenWords(t) {
  if (!t) return "tokens: not reported";
  const parts = [t.input + " in", t.cachedInput + " cached", t.output + " out"];
  if (t.reasoning) parts.push(t.reasoning + " reasoning");
  return t.total + " tokens (" + parts.join(", ") + ")";
}

/** How long from `a` to `b`, in words; "running" without an end. */
function span(a, b) {
  if (!a || !b) return "running";
  return took(Date.parse(b) - Date.parse(a));
}

/** `ms` milliseconds in words. */
function took(ms) {
  if (isNaN(ms)) return "—";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

function bytes(n) {
  if (n < 1024) return n + " bytes";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1024 / 1024).toFixed(1) + " MiB";
}

function statusBadge(status) {
  const tone = { completed: "idle", accepted: "idle", sent: "idle", inProgress: "busy", pending: "approval",
    failed: "blocked", declined: "blocked" }[status] || "off";
  return h("span", { class: "badge " + tone, "data-status": status }, status);
}

/** A diff, one line per element, coloured by its first character. An added
 * or deleted file's diff is its content: every line is added or removed. */
function diffView(change) {
  const lines = change.diff.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return h("pre", { class: "diff" }, lines.map((line) => {
    let cls = "ctx";
    if (change.change === "add") cls = "add";
    else if (change.change === "delete") cls = "del";
    else if (line.startsWith("+++") || line.startsWith("---")) cls = "meta";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    else if (line.startsWith("@@")) cls = "hunk";
    return h("span", { class: cls }, line + "\n");
  }));
}

const ITEM_VIEWS = {
  prompt: (it) => [
    h("div", { class: "item-head" }, h("b", {}, "Prompt as sent"), it.truncated ? h("span", { class: "small muted" }, " (cut)") : null),
    it.parts.map((p) => p.untrusted
      ? h("div", { class: "untrusted" },
        h("div", { class: "untrusted-label" }, "untrusted — written by someone else, passed to the model as data"),
        h("pre", { class: "text" }, p.text))
      : h("pre", { class: "text" }, p.text)),
  ],
  commandExecution: (it) => [
    h("div", { class: "item-head" },
      h("code", { class: "cmd" }, "$ " + it.command),
      it.exitCode === null || it.exitCode === undefined
        ? statusBadge(it.status)
        : h("span", { class: "badge exit " + (it.exitCode === 0 ? "idle" : "blocked"), "data-exit": String(it.exitCode) },
          "exit " + it.exitCode),
      typeof it.durationMs === "number" ? h("span", { class: "small muted" }, took(it.durationMs)) : null),
    h("div", { class: "small muted" }, "in ", h("span", { class: "mono" }, it.cwd)),
    it.output ? h("details", { class: "output" },
      h("summary", {}, "output, " + bytes(it.outputBytes) + (it.outputTruncated ? " — the last 8 KiB are kept" : "")),
      h("pre", { class: "text" }, it.output)) : h("div", { class: "small muted" }, "no output"),
  ],
  fileChange: (it) => [
    h("div", { class: "item-head" }, h("b", {}, "File change"), statusBadge(it.status)),
    h("ul", { class: "files" }, it.changes.map((c) => h("li", {},
      h("span", { class: "mono" }, c.path), c.movePath ? h("span", { class: "mono" }, " → " + c.movePath) : null,
      " ", h("span", { class: "small muted" }, c.change), " ",
      h("span", { class: "plus" }, "+" + c.added), " ", h("span", { class: "minus" }, "−" + c.removed),
      h("details", { class: "diff-box" },
        h("summary", {}, "diff" + (c.truncated ? " (cut: at most 256 KiB of diff per change is kept)" : "")),
        diffView(c))))),
  ],
  mcpToolCall: (it) => [
    h("div", { class: "item-head" }, h("code", { class: "tool" }, it.server + "." + it.tool), statusBadge(it.status),
      it.truncated ? h("span", { class: "small muted" }, "(cut)") : null),
    h("pre", { class: "args" }, typeof it.arguments === "string" ? it.arguments : JSON.stringify(it.arguments, null, 2)),
    it.error ? h("div", { class: "error-text" }, it.error) : null,
    it.result ? h("details", {}, h("summary", {}, "result"), h("pre", { class: "text" }, it.result)) : null,
  ],
  approval: (it) => [
    h("div", { class: "item-head" }, h("b", {}, "Approval: " + String(it.request).replace(/_/g, " ")), statusBadge(it.status),
      it.decision ? h("span", { class: "decision" }, "decision: " + it.decision) : h("span", { class: "muted" }, "undecided")),
    h("pre", { class: "args" }, typeof it.detail === "string" ? it.detail : JSON.stringify(it.detail, null, 2)),
  ],
  agentMessage: (it) => [h("div", { class: "item-head" }, h("b", {}, "Agent")), h("pre", { class: "text" }, it.text)],
  userMessage: (it) => [h("div", { class: "item-head" }, h("b", {}, "User message")), h("pre", { class: "text" }, it.text)],
  reasoning: (it) => [h("details", {}, h("summary", {}, "Reasoning"), h("pre", { class: "text" }, it.summary))],
};

function itemView(it) {
  const body = ITEM_VIEWS[it.kind];
  return h("li", { class: "item " + it.kind, "data-kind": it.kind, "data-item": it.itemId },
    ...(body ? body(it) : [h("span", { class: "muted" }, (it.itemType || it.kind) + " " + it.status)]));
}

function turnHead(t) {
  return h("div", { class: "turn-head" },
    h("span", { class: "mono" }, t.turnId), h("span", {}, t.kind.replace(/_/g, " ")), statusBadge(t.status),
    h("span", { class: "small" }, span(t.startedAt, t.completedAt)),
    h("span", { class: "small tokens" }, tokenWords(t.tokens)),
    t.itemsCapped ? h("span", { class: "small muted" }, "later items not kept (2,000 per turn)") : null);
}

/** The task page's Transcript section; fills itself page by page. */
function transcriptSection(taskId) {
  const turns = h("ol", { class: "turns", id: "transcript-turns" });
  const more = h("div", { id: "transcript-more" });
  const status = h("p", { class: "small muted" }, "Loading…");
  const byTurn = new Map();
  async function load(cursor) {
    let page;
    const q = cursor ? "?cursor=" + encodeURIComponent(cursor) : "";
    try { page = await api("/tasks/" + encodeURIComponent(taskId) + "/transcript" + q); } catch (e) {
      status.textContent = e.message;
      return;
    }
    status.textContent = page.turns.length || byTurn.size ? "" : "No turn yet.";
    for (const t of page.turns) {
      let entry = byTurn.get(t.turnId);
      if (!entry) {
        entry = { head: turnHead(t), items: h("ol", { class: "items" }) };
        byTurn.set(t.turnId, entry);
        turns.append(h("li", { class: "turn", "data-turn": t.turnId }, entry.head, entry.items));
      } else {
        const head = turnHead(t);
        entry.head.replaceWith(head);
        entry.head = head;
      }
      entry.items.append(...t.items.map(itemView));
    }
    more.replaceChildren(...(page.nextCursor
      ? [h("button", { id: "transcript-more-button", onclick: () => load(page.nextCursor) }, "More")]
      : []));
  }
  load(null);
  return h("section", { class: "panel", id: "transcript" }, h("h2", {}, "Transcript"), status, turns, more);
}

/** `#session/<key>`: the Issue/PR's turns across its tasks. */
async function renderSession(key, cursor, append) {
  let page;
  const q = cursor ? "?cursor=" + encodeURIComponent(cursor) : "";
  try { page = await api("/sessions/" + encodeURIComponent(key) + "/turns" + q); } catch (e) {
    return view(h("p", { class: "result err" }, e.message));
  }
  if (current.view !== "session" || current.arg !== key) return;
  const rows = page.turns.map((t) => h("tr", { "data-turn": t.turnId },
    h("td", {}, time(t.startedAt)), h("td", {}, taskLink(t.taskId)), h("td", {}, t.kind.replace(/_/g, " ")),
    h("td", {}, statusBadge(t.status)), h("td", { class: "num" }, span(t.startedAt, t.completedAt)),
    h("td", { class: "num" }, t.tokens ? String(t.tokens.total) : "—"),
    h("td", { class: "small" }, (t.finalText || "").slice(0, 160))));
  if (append) {
    const body = document.querySelector("#session-turns tbody");
    if (body) body.append(...rows);
  } else {
    view(
      h("p", {}, h("a", { href: "#tasks?resource=" + encodeURIComponent(key) }, "← tasks of this Issue/PR")),
      h("h1", {}, "Session ", giteaLink(key)),
      h("section", { class: "panel" }, h("div", { class: "facts" },
        h("span", {}, "session: ", h("b", { class: "mono" }, page.sessionKey)),
        h("span", {}, "thread: ", h("b", { class: "mono" }, page.threadId || "—")),
        h("a", { href: "#workflows?session=" + encodeURIComponent(key), id: "session-workflows" }, "its workflows"))),
      h("section", { class: "panel" }, h("h2", {}, "Turns across tasks"),
        rows.length ? h("div", { class: "table-wrap" }, h("table", { id: "session-turns" },
          h("thead", {}, h("tr", {}, ["started", "task", "kind", "status", "took", "tokens", "final text"].map((x) => h("th", {}, x)))),
          h("tbody", {}, rows))) : h("p", { class: "empty" }, "No turn yet."),
        h("div", { id: "session-more" })));
  }
  const more = document.getElementById("session-more");
  if (more) {
    more.replaceChildren(...(page.nextCursor
      ? [h("button", { onclick: () => renderSession(key, page.nextCursor, true) }, "More")]
      : []));
  }
}
