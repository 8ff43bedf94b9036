// tagwired dashboard: polls /api/listing once a second with the token the
// page was opened with (?token=...), and redraws the tables.
"use strict";
(function () {
  var token = new URLSearchParams(window.location.search).get("token") || "";
  var statusEl = document.getElementById("status");

  function text(v) { return v === null || v === undefined ? "–" : String(v); }
  function num(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en"); }
  function perSec(v) { return v === null || v === undefined ? "–" : (Math.round(v * 100) / 100) + "/s"; }
  function us(v) { return v === null || v === undefined ? "–" : (v / 1000).toFixed(3) + " ms"; }
  function bps(v) { return v === null || v === undefined ? "–" : Math.round(v / 1024) + " KiB/s"; }

  function cell(tr, value, cls, data) {
    var td = document.createElement("td");
    td.textContent = value;
    if (cls) { td.className = cls; }
    if (data) { Object.keys(data).forEach(function (k) { td.dataset[k] = data[k]; }); }
    tr.appendChild(td);
  }

  function fill(id, rows, more, row) {
    var body = document.querySelector("#" + id + " tbody");
    var cols = document.querySelectorAll("#" + id + " thead th").length;
    body.textContent = "";
    rows.forEach(function (r) { var tr = document.createElement("tr"); row(tr, r); body.appendChild(tr); });
    if (more > 0) {
      var tr = document.createElement("tr");
      tr.className = "more";
      var td = document.createElement("td");
      td.colSpan = cols;
      td.textContent = "… and " + more + " more (see `tagwire list`)";
      tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  function render(d) {
    document.getElementById("server").textContent = d.server;
    var t = d.totals;
    var totals = document.getElementById("totals");
    totals.textContent = "";
    [["connections", num(t.connections)], ["endpoints", num(t.endpoints)],
     ["subscriptions", num(t.subscriptions)], ["tags", num(t.tags)],
     ["published", num(t.published)], ["publish rate", perSec(t.publish_rate)],
     ["delivered", num(t.delivered)], ["delivery rate", perSec(t.deliver_rate)],
     ["buffered", num(t.buffered_bytes) + " B"], ["daemons", num(t.daemons)]].forEach(function (p) {
      var div = document.createElement("div");
      var b = document.createElement("b");
      b.textContent = p[1];
      div.appendChild(b);
      div.appendChild(document.createTextNode(p[0]));
      totals.appendChild(div);
    });
    fill("tags", d.tags.rows, d.tags.more, function (tr, r) {
      cell(tr, r.tag, "tag");
      cell(tr, num(r.published), "num");
      cell(tr, perSec(r.rate), "num rate", { tag: r.tag, rate: r.rate === null ? "" : r.rate });
      cell(tr, r.last_publisher);
    });
    fill("channels", d.channels.rows, d.channels.more, function (tr, r) {
      cell(tr, r.endpoint);
      cell(tr, r.pattern);
      cell(tr, num(r.queue_depth) + " / " + num(r.queue_bound), "num");
      cell(tr, r.discard);
      cell(tr, r.route);
      cell(tr, num(r.delivered), "num");
      cell(tr, perSec(r.rate), "num rate", { endpoint: r.endpoint, rate: r.rate === null ? "" : r.rate });
      cell(tr, num(r.dropped), "num");
      cell(tr, num(r.expired), "num");
      cell(tr, num(r.too_large), "num");
      cell(tr, num(r.scaled_out), "num");
      cell(tr, [r.proxy, r.transform].filter(function (x) { return x; }).join(", ") || "–");
    });
    fill("lanes", d.lanes, 0, function (tr, r) {
      cell(tr, r.band + (r.band === d.default_band ? " (default)" : ""));
      cell(tr, r.sched === r.sched_applied ? r.sched : r.sched_applied + " (wanted " + r.sched + ")");
      cell(tr, text(r.dscp), "num");
      cell(tr, [r.tcp, r.unix].filter(function (x) { return x; }).join(" ") || "–");
      cell(tr, num(r.connections), "num");
      cell(tr, r.busy === null ? "–" : (r.busy * 100).toFixed(1) + " %", "num");
    });
    fill("links", d.links, 0, function (tr, r) {
      cell(tr, r.peer);
      cell(tr, r.addr);
      cell(tr, us(r.rtt_us), "num");
      cell(tr, us(r.clock_offset_us), "num");
      cell(tr, num(r.events_in) + " / " + num(r.events_out), "num");
      cell(tr, bps(r.rate_in_bps) + " / " + bps(r.rate_out_bps), "num");
      cell(tr, num(r.queue_depth), "num");
      cell(tr, num(r.dropped), "num");
    });
    fill("endpoints", d.endpoints.rows, d.endpoints.more, function (tr, r) {
      cell(tr, r.name);
      cell(tr, r.kind);
      cell(tr, text(r.connection), "num");
      cell(tr, text(r.identity));
    });
    fill("connections", d.connections.rows, d.connections.more, function (tr, r) {
      cell(tr, text(r.id), "num");
      cell(tr, r.name);
      cell(tr, r.peer);
      cell(tr, r.identity);
      cell(tr, r.band);
    });
    statusEl.className = "status live";
    statusEl.textContent = "live, updated " + new Date().toLocaleTimeString() +
      (d.truncated ? " (listing truncated)" : "");
  }

  function poll() {
    var headers = token ? { "Authorization": "Bearer " + token } : {};
    fetch("/api/listing", { headers: headers, cache: "no-store" })
      .then(function (resp) {
        if (!resp.ok) {
          return resp.text().then(function (m) { throw new Error(resp.status + ": " + m); });
        }
        return resp.json();
      })
      .then(render)
      .catch(function (e) {
        statusEl.className = "status error";
        statusEl.textContent = "cannot read the listing: " + e.message;
      })
      .then(function () { window.setTimeout(poll, 1000); });
  }
  poll();
})();
