// codex-bridge admin view: the Codex panel under the overview. Codex's
// account and rate limits, and signing Codex in (device code or API key) and
// out, all through the admin API's /codex routes with the session cookie.
// It uses app.js's helpers (h, api, post, toast, action, time, current),
// which that script, loaded first, declares. Text from the server is only
// ever set with textContent; the verification address becomes a link only
// when it is https.
"use strict";

const codex = {
  /** Polls the account while the overview shows. */
  timer: null,
  /** Polls a device-code sign-in until it ends. */
  loginTimer: null,
  built: false,
};

function codexShown() {
  return current.view === "overview";
}

function codexEl(id) {
  return document.getElementById(id);
}

function codexError(text) {
  const box = codexEl("codex-error");
  box.hidden = !text;
  box.textContent = text || "";
}

function describeWindow(name, w) {
  if (!w) return null;
  let span = "";
  if (w.windowMinutes) {
    const m = w.windowMinutes;
    span = m % 1440 === 0 ? " of " + m / 1440 + " d" : m % 60 === 0 ? " of " + m / 60 + " h" : " of " + m + " min";
  }
  return h("div", { class: "codex-window", "data-window": name },
    h("b", {}, name + ": "), h("span", { class: "codex-used" }, w.usedPercent + "% used"), span,
    w.resetsAt ? h("span", { class: "muted" }, " · resets ", time(w.resetsAt)) : null);
}

function renderCodexStatus(s) {
  const status = codexEl("codex-status");
  let account;
  let tone = "idle";
  if (s.account) {
    const a = s.account;
    if (a.type === "apiKey") account = "API key";
    else if (a.type === "chatgpt") {
      account = "ChatGPT" + (a.email ? " · " + a.email : "") + (a.planType ? " · plan " + a.planType : "");
    } else account = a.type;
  } else if (s.requiresOpenaiAuth) {
    account = "signed out: tasks wait until Codex is signed in";
    tone = "blocked";
  } else {
    account = "none needed (the model provider needs no OpenAI account)";
  }
  let limits;
  if (s.rateLimits === "notApplicable") {
    limits = h("span", { id: "codex-rate-limits", "data-state": "notApplicable" },
      "not applicable" + (s.account ? " (only ChatGPT accounts have them)" : ""));
  } else if (s.rateLimits === "unavailable") {
    limits = h("span", { id: "codex-rate-limits", class: "error-text", "data-state": "unavailable" },
      "unavailable: " + (s.rateLimitsError || "no reason given"));
  } else {
    const r = s.rateLimits || {};
    const windows = [describeWindow("primary", r.primary), describeWindow("secondary", r.secondary)].filter(Boolean);
    limits = h("div", { id: "codex-rate-limits", "data-state": "read" },
      windows.length ? windows : "none reported");
  }
  status.replaceChildren(
    h("div", { class: "facts" },
      h("span", {}, "account: ", h("b", { id: "codex-account", class: "codex-" + tone,
        "data-type": s.account ? s.account.type : "none" }, account))),
    h("div", { class: "facts" }, h("span", {}, "rate limits: "), limits));
  codexEl("codex-sign-out").hidden = !s.account;
}

async function loadCodex() {
  if (!codexShown()) return;
  try {
    const s = await api("/codex");
    codexEl("codex-actions").hidden = false;
    renderCodexStatus(s);
    codexError(null);
  } catch (e) {
    if (e.code === "codex_not_configured") {
      codexEl("codex-actions").hidden = true;
      codexEl("codex-status").replaceChildren(h("p", { class: "muted", id: "codex-account" }, e.message));
      return;
    }
    codexError((e.code ? e.code + ": " : "") + e.message);
  }
}

function showDeviceCode(code) {
  const url = String(code.verificationUrl || "");
  const link = /^https:\/\//i.test(url)
    ? h("a", { href: url, target: "_blank", rel: "noopener noreferrer", id: "codex-verification-url" }, url)
    : h("code", { id: "codex-verification-url" }, url);
  codexEl("codex-device").hidden = false;
  codexEl("codex-device").replaceChildren(
    h("p", {}, "Open ", link, ", sign in with the ChatGPT account Codex should use, and enter the code"),
    h("p", { class: "codex-code" }, h("code", { id: "codex-user-code" }, code.userCode)),
    h("p", { class: "small muted", id: "codex-login-state", "data-state": "pending" }, "Waiting for the sign-in…"));
}

function endDeviceLogin(state, text) {
  clearInterval(codex.loginTimer);
  codex.loginTimer = null;
  const line = codexEl("codex-login-state");
  if (line) {
    line.dataset.state = state;
    line.className = state === "failed" ? "small error-text" : "small";
    line.textContent = text;
  }
  codexEl("codex-device-start").disabled = false;
  loadCodex();
}

async function startDeviceLogin() {
  const button = codexEl("codex-device-start");
  button.disabled = true;
  codexError(null);
  let code;
  try {
    code = await post("/codex/login", { type: "deviceCode", reason: "signed in from the admin view" });
  } catch (e) {
    button.disabled = false;
    codexError((e.code ? e.code + ": " : "") + e.message);
    return;
  }
  showDeviceCode(code);
  clearInterval(codex.loginTimer);
  codex.loginTimer = setInterval(async () => {
    let s;
    try { s = await api("/codex/login/" + encodeURIComponent(code.loginId)); } catch (e) {
      endDeviceLogin("failed", e.message);
      return;
    }
    if (s.status === "completed") {
      endDeviceLogin("completed", "Codex is signed in.");
      toast("Codex is signed in");
    } else if (s.status === "failed") {
      endDeviceLogin("failed", "The sign-in failed: " + (s.error || "no reason given"));
    }
  }, 2000);
}

async function apiKeyLogin(ev) {
  ev.preventDefault();
  const input = codexEl("codex-api-key");
  const key = input.value.trim();
  // The field is emptied at once: the key is in the page no longer than needed.
  input.value = "";
  if (!key) { input.focus(); return; }
  const button = codexEl("codex-api-key-submit");
  button.disabled = true;
  codexError(null);
  try {
    await post("/codex/login", { type: "apiKey", apiKey: key, reason: "signed in from the admin view" });
    toast("Codex is signed in with an API key");
    loadCodex();
  } catch (e) {
    codexError((e.code ? e.code + ": " : "") + e.message);
  } finally {
    button.disabled = false;
  }
}

function signOutCodex() {
  action({
    title: "Sign Codex out",
    what: "Codex's stored credentials are removed. If its model provider needs an account, tasks wait queued until it is signed in again.",
    confirm: "Sign out",
    send: async (c) => {
      const r = await post("/codex/logout", c);
      loadCodex();
      return r.event || { action: "codex.logout", actor: "", eventId: "", timestamp: "" };
    },
  });
}

function buildCodexPanel() {
  const panel = codexEl("codex");
  panel.replaceChildren(
    h("h2", { id: "codex-title" }, "Codex"),
    h("div", { id: "codex-status" }, h("p", { class: "muted" }, "Reading Codex's account…")),
    h("p", { id: "codex-error", class: "result err", role: "alert", hidden: true }),
    h("div", { id: "codex-actions", hidden: true },
      h("div", { class: "actions" },
        h("button", { id: "codex-device-start", class: "primary small", onclick: startDeviceLogin }, "Sign in with device code"),
        h("button", { id: "codex-sign-out", class: "danger small", hidden: true, onclick: signOutCodex }, "Sign out")),
      h("div", { id: "codex-device", class: "codex-device", hidden: true }),
      h("form", { id: "codex-api-key-form", class: "filters", onsubmit: apiKeyLogin, autocomplete: "off" },
        h("div", {}, h("label", { for: "codex-api-key" }, "Or an OpenAI API key"),
          h("input", { id: "codex-api-key", type: "password", autocomplete: "off", spellcheck: "false",
            placeholder: "sk-…", required: true })),
        h("div", {}, h("button", { id: "codex-api-key-submit", type: "submit", class: "small" }, "Sign in with API key")))));
  codex.built = true;
}

function showCodexPanel() {
  const panel = codexEl("codex");
  if (!codexShown()) {
    panel.hidden = true;
    clearInterval(codex.timer);
    codex.timer = null;
    return;
  }
  if (!codex.built) buildCodexPanel();
  panel.hidden = false;
  loadCodex();
  if (!codex.timer) codex.timer = setInterval(loadCodex, 30000);
}

window.addEventListener("hashchange", showCodexPanel);
document.addEventListener("DOMContentLoaded", showCodexPanel);
