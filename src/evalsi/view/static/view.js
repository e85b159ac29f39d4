// evalsi view: live updates of runs and curves in progress. Everything else works without JavaScript.
// The page polls the run's stamp (its files' sizes and times); when it changes, the run's section is fetched
// again from the server (already rendered and escaped there) and swapped in, so the page never reloads.
(function () {
  "use strict";
  // The metric picker shows its choice at once (its form still works without JavaScript).
  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "metric-picker") { event.target.form.submit(); }
  });
  var live = document.getElementById("live");
  if (!live || !live.dataset.stampUrl) { return; }
  var stamp = live.dataset.stamp;
  var busy = false;
  function refresh() {
    if (busy) { return; }
    busy = true;
    fetch(live.dataset.stampUrl, { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (body) {
        if (body.stamp === stamp) { return null; }
        stamp = body.stamp;
        return fetch(live.dataset.fragmentUrl, { cache: "no-store" }).then(function (r) { return r.text(); });
      })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString("<div>" + html + "</div>", "text/html");
        live.replaceChildren.apply(live, Array.prototype.slice.call(doc.body.firstChild.childNodes));
        var status = document.getElementById("run-status");
        if (status) { live.dataset.status = status.textContent; }
        live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
      })
      .catch(function () { /* the server may be restarting; try again on the next tick */ })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, 1000);
})();
