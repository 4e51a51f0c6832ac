// Live updates: every element with data-refresh="/path" is replaced, every few seconds,
// by the server-rendered (escaped) HTML that path returns. The pages work without it.
"use strict";
(function () {
  const PERIOD_MS = 5000;
  async function refresh(element) {
    try {
      const response = await fetch(element.dataset.refresh, {
        credentials: "same-origin",
        headers: { "Accept": "text/html" },
      });
      if (response.ok) {
        element.innerHTML = await response.text();
        element.dataset.refreshed = String(Date.now());
      }
    } catch (error) {
      // The dashboard is down or restarting: keep what is shown, try again later.
    }
  }
  function start() {
    for (const element of document.querySelectorAll("[data-refresh]")) {
      setInterval(() => refresh(element), PERIOD_MS);
    }
  }
  document.addEventListener("DOMContentLoaded", start);
})();
