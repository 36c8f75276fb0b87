(function () {
  "use strict";
  var source = document.getElementById("bundle-data");
  if (!source) { return; }
  var data = JSON.parse(source.textContent);
  var q = document.getElementById("q");
  var fVerdict = document.getElementById("f-verdict");
  var fVerified = document.getElementById("f-verified");
  var fModel = document.getElementById("f-model");
  var fRisk = document.getElementById("f-risk");
  var count = document.getElementById("shown-count");
  var rowsById = {};
  Array.prototype.forEach.call(document.querySelectorAll("tr[data-bundle]"), function (tr) {
    var id = tr.getAttribute("data-bundle");
    (rowsById[id] = rowsById[id] || []).push(tr);
  });
  function matches(b, words) {
    if (fVerdict.value && b.v !== fVerdict.value) { return false; }
    if (fVerified.value === "verified" && !b.ok) { return false; }
    if (fVerified.value === "unverified" && b.ok) { return false; }
    if (fModel.value && b.m !== fModel.value) { return false; }
    if (fRisk.value === "attention" && b.risk === "none") { return false; }
    for (var i = 0; i < words.length; i++) {
      if (b.s.indexOf(words[i]) < 0) { return false; }
    }
    return true;
  }
  function apply() {
    var words = q.value.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 0; });
    var shown = 0;
    data.forEach(function (b) {
      var ok = matches(b, words);
      if (ok) { shown += 1; }
      (rowsById[b.id] || []).forEach(function (tr) { tr.hidden = !ok; });
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-filter-section]"), function (sec) {
      sec.hidden = sec.querySelector("tr[data-bundle]:not([hidden])") === null;
    });
    count.textContent = shown + " of " + data.length + " bundles match";
    var state = [];
    if (q.value) { state.push("q=" + encodeURIComponent(q.value)); }
    [["verdict", fVerdict], ["verified", fVerified], ["model", fModel], ["risk", fRisk]].forEach(function (p) {
      if (p[1].value) { state.push(p[0] + "=" + encodeURIComponent(p[1].value)); }
    });
    if (window.history && window.history.replaceState) {
      try { window.history.replaceState(null, "", state.length ? "#" + state.join("&") : window.location.pathname); } catch (e) { /* file: URLs */ }
    }
  }
  function restore() {
    var h = window.location.hash.replace(/^#/, "");
    if (!h || h.indexOf("=") < 0) { return; }
    h.split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      var k = kv.slice(0, i), v = decodeURIComponent(kv.slice(i + 1));
      var el = { q: q, verdict: fVerdict, verified: fVerified, model: fModel, risk: fRisk }[k];
      if (el) { el.value = v; }
    });
  }
  [q, fVerdict, fVerified, fModel, fRisk].forEach(function (el) {
    el.addEventListener("input", apply);
    el.addEventListener("change", apply);
  });
  restore();
  apply();
})();
