// Draws the report's charts with uPlot from the JSON in #report-data; never reads log text.
// After drawing it writes each chart's canvas size into #chart-sizes (headless tests read it).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var palette = ["#2f6fdf", "#d9480f", "#2b8a3e", "#9c36b5", "#e8590c", "#0b7285", "#c2255c", "#5c940d",
                 "#364fc7", "#a61e4d", "#087f5b", "#862e9c"];
  var utc = function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); };
  var sizes = [], plots = [];

  function lines(u, hlines, markers) {
    var ctx = u.ctx, left = u.bbox.left, top = u.bbox.top, w = u.bbox.width, h = u.bbox.height;
    ctx.save();
    ctx.font = (11 * devicePixelRatio) + "px sans-serif";
    ctx.textAlign = "left"; ctx.textBaseline = "bottom";
    hlines.forEach(function (line) {
      var y = u.valToPos(line.value, "y", true);
      if (!isFinite(y) || y < top || y > top + h) { return; }
      ctx.strokeStyle = "#c92a2a"; ctx.lineWidth = 1.5 * devicePixelRatio; ctx.setLineDash([]);
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + w, y); ctx.stroke();
      ctx.fillStyle = "#c92a2a"; ctx.fillText(line.label, left + 4, y - 4);
    });
    markers.forEach(function (m, i) {
      var x = u.valToPos(m.ts, "x", true);
      if (!isFinite(x) || x < left || x > left + w) { return; }
      ctx.strokeStyle = "#868e96"; ctx.lineWidth = devicePixelRatio; ctx.setLineDash([4, 4]);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      ctx.fillStyle = "#495057"; ctx.fillText(m.kind, x + 3, top + (12 + 12 * (i % 12)) * devicePixelRatio);
    });
    ctx.restore();
  }

  function draw(spec) {
    var box = document.querySelector("#chart-" + spec.key + " .plot");
    var chart = data.charts[spec.key];
    var names = Object.keys(chart.series);
    if (!box || names.length === 0) { return; }
    var columns = [chart.x], series = [{}], bands = [];
    names.forEach(function (name, i) {
      var values = chart.series[name].map(function (v) { return v === null ? null : v * spec.scale; });
      var pair = spec.pairs && / min$/.test(name);
      var base = spec.pairs ? Math.floor(i / 2) : i;
      columns.push(values);
      series.push({label: name, stroke: palette[base % palette.length], width: pair ? 1 : 2,
                   dash: pair ? [3, 3] : undefined, value: function (u, v) { return v === null ? "—" : v.toFixed(spec.digits); },
                   paths: spec.stepped ? uPlot.paths.stepped({align: 1}) : undefined});
      if (pair) { bands.push({series: [i, i + 1], fill: palette[base % palette.length] + "22"}); }
    });
    var opts = {width: Math.min(1060, box.clientWidth || 1000), height: 260, tzDate: utc, series: series, bands: bands,
                scales: {y: {range: function (u, lo, hi) {
                  var top = Math.max(hi, spec.hlines.reduce(function (m, l) { return Math.max(m, l.value); }, 0));
                  return [Math.min(0, lo), top > 0 ? top * 1.08 : 1]; }}},
                axes: [{}, {label: spec.unit, size: 64}],
                hooks: {draw: [function (u) { lines(u, spec.hlines, data.markers); }]}};
    var plot = new uPlot(opts, columns, box);
    plots.push({key: spec.key, plot: plot, series: names.length, points: chart.x.length});
  }

  var gib = 1 / (1024 * 1024 * 1024);
  data.specs.forEach(function (spec) {
    spec.scale = spec.unit === "GiB" ? gib : (spec.unit === "%" ? 100 : 1);
    spec.hlines = spec.hlines.map(function (l) { return {value: l.value * spec.scale, label: l.label}; });
    try { draw(spec); } catch (err) { sizes.push({chart: spec.key, error: String(err)}); }
  });
  // Measured once layout has run: the canvas's size on the page and its pixel buffer.
  setTimeout(function () {
    plots.forEach(function (p) {
      var canvas = p.plot.root.querySelector("canvas"), rect = canvas.getBoundingClientRect();
      sizes.push({chart: p.key, series: p.series, points: p.points, width: Math.round(rect.width),
                  height: Math.round(rect.height), pixels: canvas.width * canvas.height});
    });
    document.getElementById("chart-sizes").textContent = JSON.stringify(sizes);
    document.body.setAttribute("data-charts-drawn", String(sizes.filter(function (s) { return s.width > 0; }).length));
  }, 0);
})();
