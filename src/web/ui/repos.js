// codex-bridge admin view: the "hook" fact of each repository in the actors
// view, from GET /repos/{repoKey}/hook: whether the repository's webhook
// sends to this server as `gitea hook` would set it up. Each answer is one
// call to Gitea, so it is fetched lazily, once per repository, and kept for
// a minute; the actor tree re-renders on every live update and reuses it.
// It uses app.js's helpers (h, api), which that script, loaded first,
// declares. Text from the server is only ever set with textContent.
"use strict";

const hooks = {
  /** repoKey → { at, view, pending } */
  cache: new Map(),
  ttlMs: 60000,
};

// Hook states: a badge colour and words.
const HOOK_TONES = {
  ok: ["idle", "ok"],
  missing: ["blocked", "missing"],
  drifted: ["blocked", "drifted"],
  duplicated: ["approval", "duplicated"],
  unknown: ["off", "unknown"],
};

function hookBadge(view) {
  if (!view) return h("span", { class: "badge off", "data-hook-state": "" }, "…");
  const [tone, label] = HOOK_TONES[view.state] || ["off", view.state];
  const title = view.detail + (view.action ? " — what to do: " + view.action : "");
  return h("span", { class: "badge " + tone, "data-hook-state": view.state, title: title }, label);
}

/** Fills every shown hook fact of `repoKey` (a re-render may have replaced the one asked for). */
function showHook(repoKey, view) {
  for (const el of document.querySelectorAll(".hook-fact")) {
    if (el.dataset.repo === repoKey) el.replaceChildren("hook: ", hookBadge(view));
  }
}

function fetchHook(repoKey) {
  const entry = hooks.cache.get(repoKey) || {};
  if (entry.pending) return;
  entry.pending = true;
  hooks.cache.set(repoKey, entry);
  api("/repos/" + encodeURIComponent(repoKey) + "/hook")
    .then((view) => { entry.view = view; })
    .catch((e) => {
      entry.view = { state: "unknown", detail: e.message, action: null };
    })
    .finally(() => {
      entry.pending = false;
      entry.at = Date.now();
      showHook(repoKey, entry.view);
    });
}

/** The hook fact of one repository node: what is known now, fetched when stale. */
function hookFact(repoKey) {
  const entry = hooks.cache.get(repoKey);
  if (!entry || !entry.at || Date.now() - entry.at > hooks.ttlMs) fetchHook(repoKey);
  return h("span", { class: "hook-fact", "data-repo": repoKey }, "hook: ", hookBadge(entry && entry.view));
}
