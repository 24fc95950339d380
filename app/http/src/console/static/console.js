// Herald console: progressive enhancement only — every page works without this file.
// A form is submitted once: after the first submit its buttons are disabled, so a double click cannot
// send a decision twice (the server would refuse the second anyway, and say so).
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) { return; }
    if (form.dataset.sent === "1") { event.preventDefault(); return; }
    form.dataset.sent = "1";
    // Disabled after the event, so the pressed button's name=value is still part of the submission.
    window.setTimeout(function () {
      form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    }, 0);
  });
})();

// Times are rendered by the server in UTC, in a <time datetime> element; here each is shown in the
// viewer's own time zone, with the UTC text kept as its tooltip. Without this file the UTC text stays.
(function () {
  "use strict";
  function localise() {
    var lang = document.documentElement.lang || undefined;
    var format;
    try {
      format = new Intl.DateTimeFormat(lang, {
        year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short"
      });
    } catch (e) { return; }
    // The same order in every language, as the server writes UTC: 2026-12-03 20:26:53 GMT+8.
    function text(at) {
      var p = {};
      format.formatToParts(at).forEach(function (part) { p[part.type] = part.value; });
      return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + ":" + p.second + " " + p.timeZoneName;
    }
    document.querySelectorAll("time[datetime]").forEach(function (t) {
      var at = new Date(t.getAttribute("datetime"));
      if (isNaN(at.getTime()) || t.dataset.local === "1") { return; }
      t.title = t.textContent;
      t.textContent = text(at);
      t.dataset.local = "1";
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", localise);
  } else {
    localise();
  }
})();
