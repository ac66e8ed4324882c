// Postern console: local times, expiry countdowns and the live Approvals list. Everything
// works without this file (forms post, pages reload); it only adds the live parts.
"use strict";

function localTimes(root) {
  for (const el of root.querySelectorAll("time[datetime]:not(.countdown)")) {
    const at = new Date(el.getAttribute("datetime"));
    if (isNaN(at)) continue;
    el.textContent = at.toLocaleString(undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
    });
  }
}

function countdowns() {
  const now = Date.now();
  for (const el of document.querySelectorAll("time.countdown[datetime]")) {
    const left = Math.round((new Date(el.getAttribute("datetime")) - now) / 1000);
    if (isNaN(left)) continue;
    if (left <= 0) {
      el.textContent = "expired";
      el.classList.add("expired");
      continue;
    }
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
    el.textContent = "in " + (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s";
  }
}

function live() {
  const rows = document.getElementById("approval-rows");
  if (!rows || !rows.dataset.live || !window.EventSource) return;
  const source = new EventSource("/ui/events");
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch(rows.dataset.live, { credentials: "same-origin", redirect: "manual" });
      if (r.ok) {
        const html = await r.text();
        // A reason being typed survives the swap (and keeps its focus): read just before it.
        const key = (el) => (el.closest("tr") || {}).id + "|" + (el.closest("form") || {}).className;
        const typed = {};
        for (const input of rows.querySelectorAll("input[type=text]")) {
          if (input.value) typed[key(input)] = input.value;
        }
        const active = rows.contains(document.activeElement) ? key(document.activeElement) : null;
        // Server-rendered and escaped by the console's templates.
        rows.innerHTML = html;
        for (const input of rows.querySelectorAll("input[type=text]")) {
          const k = key(input);
          if (typed[k] !== undefined) input.value = typed[k];
          if (k === active) input.focus();
        }
        const count = r.headers.get("postern-pending");
        const label = document.getElementById("pending-count");
        if (count !== null && label) label.textContent = count + " pending";
        localTimes(rows);
        countdowns();
      } else if (r.type === "opaqueredirect" || r.status === 401) {
        source.close();
        location.reload();
      }
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  source.addEventListener("approvals", refresh);
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  countdowns();
  setInterval(countdowns, 1000);
  live();
});
