// codex-bridge admin view: the remote workers (GET /workers). Each with its
// health, the repositories it was given, the leases it holds, its last
// heartbeat and version, the uncertain tasks the server knows wait on it
// beside the uncertain turns the worker's own journal holds, and a revoke
// button (the confirmation dialog, POST /workers/{id}/revoke). Fetched when
// the view opens and every 10 s while it stays open (heartbeats are not on
// the live stream). Uses app.js's helpers and actions.js's dialog; text from
// the server is only ever set with textContent.
"use strict";

const WORKER_HEALTH = {
  ok: ["idle", "ok"],
  never_seen: ["off", "never seen"],
  offline: ["blocked", "offline"],
  uncertain: ["uncertain", "uncertain tasks"],
  revoked: ["off", "revoked"],
};

function workerHealth(state) {
  const [tone, label] = WORKER_HEALTH[state] || ["off", state || "unknown"];
  return h("span", { class: "badge " + tone, "data-health": state || "" }, label);
}

function revokeWorker(w) {
  action({
    title: "Revoke worker",
    what: w.name + " (" + w.workerId + "): its token is refused from now on and it stops. The leases it " +
      "holds end; calls it took fail closed, and their tasks are looked up or wait for reconciliation. " +
      "Nothing it ran is run again.",
    confirm: "Revoke",
    send: (c) => post("/workers/" + encodeURIComponent(w.workerId) + "/revoke", c),
  });
}

// What the worker's last heartbeat said of its journal: turns sent to Codex
// with no end recorded. It can differ from the server's tasks (a start
// whose answer never arrived, a journal not settled yet).
function workerJournal(w) {
  const n = w.uncertainTurns;
  const reported = n !== null && n !== undefined;
  const text = !reported ? "not reported" : n === 1 ? "1 uncertain turn" : n + " uncertain turns";
  return h("td", { class: "worker-journal", "data-uncertain-turns": reported ? n : "" }, text);
}

function workerRow(w) {
  const leases = (w.leases || []).map((l) =>
    h("div", { class: "worker-lease" }, h("b", {}, l.repository), " · fence " + l.fence + " · expires ",
      time(l.expiresAt)));
  const uncertain = (w.uncertainTasks || []).map((t) =>
    h("div", { class: "worker-uncertain-task" }, taskLink(t.taskId),
      h("span", { class: "small mono muted" }, " " + t.attemptId)));
  return h("tr", { class: "worker", "data-worker": w.workerId, "data-health": w.health },
    h("td", {}, h("div", { class: "worker-name" }, w.name), h("div", { class: "small mono muted" }, w.workerId)),
    h("td", { class: "worker-health" }, workerHealth(w.health)),
    h("td", { class: "worker-repositories" }, (w.repositories || []).join(", ")),
    h("td", { class: "worker-leases" }, leases.length ? leases : "none"),
    h("td", { class: "worker-heartbeat" }, time(w.lastSeenAt)),
    h("td", { class: "worker-version mono" }, w.version || "—"),
    h("td", { class: "worker-uncertain" }, uncertain.length ? uncertain : "none"),
    workerJournal(w),
    h("td", {}, w.revokedAt
      ? h("span", { class: "small muted" }, "revoked ", time(w.revokedAt))
      : h("button", { class: "small danger revoke-worker", onclick: () => revokeWorker(w) }, "Revoke")));
}

let workersTimer = null;

async function renderWorkers() {
  clearTimeout(workersTimer);
  let data;
  try {
    data = await api("/workers");
  } catch (e) {
    if (current.view === "workers") view(h("h1", {}, "Workers"), h("p", { class: "error-text" }, e.message));
    return;
  }
  if (current.view !== "workers") return;
  // Held back while a dialog is open: its close renders again.
  if (!document.getElementById("action").open) {
    view(
      h("h1", {}, "Workers"),
      h("p", { class: "small muted" },
        "Remote workers run the turns of the repositories they were given (agent_runtime = \"remote\"). " +
        "A worker with uncertain tasks takes no new work until each is reconciled: on the worker, " +
        "codex-bridge reconcile TASK ATTEMPT failed --confirm-no-active-turn --server URL --token-file FILE."),
      h("section", { class: "panel", id: "workers" },
        table(["worker", "health", "repositories", "lease held", "last heartbeat", "version", "uncertain tasks",
          "worker's journal", ""],
          (data.workers || []).map(workerRow),
          "No worker is registered (POST /api/gitea-workflow/workers).")));
  }
  workersTimer = setTimeout(() => { if (current.view === "workers") renderWorkers(); }, 10000);
}
