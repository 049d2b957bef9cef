// codex-bridge admin view: the operator's actions (pause, enable, cancel,
// abort, reconcile, clear a workspace, decide an approval, cancel a workflow,
// answer a workflow's gate for its owner). Each opens the confirmation
// dialog, sends one control request with its requestId, and shows what the
// server answered. Uses app.js's helpers; loaded after it.
"use strict";

// ---------------------------------------------------------------- actions

/** Opens the action dialog; `send(common)` performs the POST and returns the audit event. */
function action(opts) {
  const dlg = document.getElementById("action");
  const form = document.getElementById("action-form");
  document.getElementById("action-title").textContent = opts.title;
  document.getElementById("action-what").textContent = opts.what || "";
  const extra = document.getElementById("action-extra");
  extra.replaceChildren(...(opts.extra ? [opts.extra] : []));
  const reason = document.getElementById("action-reason");
  reason.value = opts.reason || "";
  const operator = document.getElementById("action-operator");
  operator.value = localStorage.getItem("cb-operator") || "";
  const rid = requestId();
  document.getElementById("action-request-id").textContent = rid;
  const result = document.getElementById("action-result");
  result.hidden = true;
  result.replaceChildren();
  const submit = document.getElementById("action-submit");
  submit.disabled = false;
  submit.textContent = opts.confirm || "Confirm";
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    if (!reason.value.trim()) { reason.focus(); return; }
    if (opts.validate) {
      const problem = opts.validate();
      if (problem) { showResult(result, null, problem); return; }
    }
    localStorage.setItem("cb-operator", operator.value.trim());
    submit.disabled = true;
    const common = { requestId: rid, reason: reason.value.trim() };
    if (operator.value.trim()) common.operator = operator.value.trim();
    try {
      const event = await opts.send(common);
      showResult(result, event, null);
      toast(opts.title + ": done (" + event.action + ")");
      submit.textContent = "Done";
      refresh();
    } catch (e) {
      showResult(result, null, (e.code ? e.code + ": " : "") + e.message);
      submit.disabled = false;
    }
  };
  document.getElementById("action-cancel").onclick = () => dlg.close();
  dlg.showModal();
  reason.focus();
}

function showResult(box, event, error) {
  box.hidden = false;
  if (error) {
    box.className = "result err";
    box.replaceChildren(h("strong", {}, "Refused: "), error);
    return;
  }
  box.className = "result ok";
  box.replaceChildren(
    h("div", {}, h("strong", {}, "Audit event "), h("code", { id: "action-event-action" }, event.action)),
    h("div", { class: "small" }, "by ", event.actor, event.toState ? " · " + (event.fromState || "—") + " → " + event.toState : "",
      " · ", h("code", {}, event.eventId), " · ", event.timestamp || ""));
}

function pauseIntake(paused) {
  action({
    title: paused ? "Resume intake" : "Pause intake",
    what: paused
      ? "Queued tasks start running again."
      : "Webhooks are still accepted and stored, but no new task starts until intake is resumed. Running turns go on.",
    confirm: paused ? "Resume" : "Pause",
    send: (c) => post(paused ? "/control/resume" : "/control/pause", c),
  });
}

function repoAction(repoKey, enabled) {
  action({
    title: (enabled ? "Disable " : "Enable ") + "repository",
    what: enabled
      ? repoKey + ": new webhooks are refused (409) and nothing new starts here until enabled again."
      : repoKey + ": webhooks are accepted and its queue runs again.",
    confirm: enabled ? "Disable" : "Enable",
    send: (c) => post("/repos/" + encodeURIComponent(repoKey) + (enabled ? "/disable" : "/enable"), c),
  });
}

function taskAction(kind, taskId) {
  const texts = {
    cancel: ["Cancel task", "Cancels a task that has not started (queued, waiting for the user, blocked workspace)."],
    abort: ["Abort task", "Interrupts the running turn. If Codex does not confirm the interrupt in time, the task needs reconciliation."],
    "clear-workspace": ["Clear blocked workspace",
      "Look at the repository's workspace first and clean it (commit, stash or remove the changes) by hand. " +
      "Confirming puts the task back in the queue; the bridge itself never resets a workspace."],
  };
  const [title, what] = texts[kind];
  action({
    title, what: taskId + " — " + what, confirm: title.split(" ")[0],
    send: (c) => post("/tasks/" + encodeURIComponent(taskId) + "/" + kind, c),
  });
}

async function reconcile(taskId) {
  let detail;
  try { detail = await api("/tasks/" + encodeURIComponent(taskId)); } catch (e) { toast(e.message, true); return; }
  const attempts = (detail.attempts || []).slice().reverse();
  const select = h("select", { id: "reconcile-attempt" },
    attempts.map((a) => h("option", { value: a.attemptId },
      "#" + a.number + " " + a.attemptId + " (" + a.status + (a.outcome ? ", " + a.outcome : "") + ")")));
  const verdict = h("select", { id: "reconcile-verdict" },
    h("option", { value: "failed" }, "failed — the attempt did not finish; nothing is re-run"),
    h("option", { value: "succeeded" }, "succeeded — I saw its result land in Gitea"));
  const confirm = h("input", { type: "checkbox", id: "reconcile-confirm" });
  const extra = h("div", {},
    h("label", { for: "reconcile-attempt" }, "Attempt"), select,
    h("label", { for: "reconcile-verdict" }, "Verdict"), verdict,
    h("div", { class: "confirm" },
      h("label", { for: "reconcile-confirm" }, confirm,
        h("span", {}, "No Codex turn of this attempt is still running (", h("code", {}, "--confirm-no-active-turn"), ")")),
      h("p", { class: "small" },
        "The bridge lost sight of this attempt after it asked Codex to start a turn, so it cannot know whether the turn ran. " +
        "Check the Codex side and Gitea first. Reconciliation records your decision for this attempt only and never re-runs anything; " +
        "afterwards the repository's queue moves on.")));
  action({
    title: "Reconcile task",
    what: taskId + " (" + detail.task.state.replace(/_/g, " ") + ")",
    extra,
    confirm: "Reconcile",
    validate: () => {
      if (!select.value) return "this task has no attempt to reconcile";
      if (!confirm.checked) return "tick the confirmation: no Codex turn of this attempt is still running";
      return null;
    },
    send: (c) => post("/tasks/" + encodeURIComponent(taskId) + "/reconcile",
      Object.assign(c, { attemptId: select.value, verdict: verdict.value, confirmNoActiveTurn: true })),
  });
}

/** The command or files an approval is about, in one line. */
function approvalSummary(approval) {
  try {
    const d = JSON.parse(approval.detail);
    const text = d.command || (d.changes && Object.keys(d.changes).join(", ")) || d.reason || "";
    return String(text).slice(0, 160);
  } catch (_) {
    return "";
  }
}

function decide(approval, accept) {
  let detail = approval.detail;
  try { detail = JSON.stringify(JSON.parse(approval.detail), null, 2); } catch (_) { /* shown as is */ }
  action({
    title: accept ? "Approve request" : "Deny request",
    what: "Task " + approval.taskId + " asks for a " + approval.kind.replace(/_/g, " ") + ".",
    extra: h("pre", { class: "mono small" }, detail),
    confirm: accept ? "Approve" : "Deny",
    send: (c) => post("/approvals/" + encodeURIComponent(approval.approvalId) + "/decide",
      Object.assign(c, { decision: accept ? "accept" : "decline" })),
  });
}

/** `w` ends cancelled (the workflow page offers it while the workflow is live). */
function cancelWorkflow(w) {
  action({
    title: "Cancel workflow",
    what: "“" + (w.title || w.workflowId) + "” — the workflow ends cancelled: a continuation that has not started is " +
      "cancelled with it and an open gate is closed. A turn already running is left to end; abort its task to stop it.",
    confirm: "Cancel workflow",
    send: (c) => post("/workflows/" + encodeURIComponent(w.workflowId) + "/cancel", c),
  });
}

/** Answers `gate` of `w` on its owner's behalf: the reason is the answer the agent gets. */
function answerGate(w, gate) {
  action({
    title: "Answer gate for the owner",
    what: "“" + (w.title || w.workflowId) + "” waits for its owner (" + (w.owner || "unknown") + "). " +
      "Your reason is the answer: it goes to the agent in a new continuation, and into the audit log.",
    extra: h("div", {},
      h("div", { class: "small muted" }, "The question (" + String(gate.kind || "").replace(/_/g, " ") + "):"),
      h("pre", { class: "text", id: "action-gate-question" }, gate.question || "")),
    confirm: "Answer",
    send: (c) => post("/workflows/" + encodeURIComponent(w.workflowId) + "/gates/" +
      encodeURIComponent(gate.gateId) + "/resume", c),
  });
}
