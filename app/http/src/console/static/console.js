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
