// A chart of [time, pages/s, items/s, errors/s] rows with a UTC time axis, a y axis in /s
// and a legend. The x axis spans the data when the data is shorter than the chosen span,
// so a 15-second crawl fills the chart instead of being a dot in a corner of ten minutes.
// A null rate (not running) or a read missing (more than 2.5 steps apart) is a gap.
// Hand-drawn SVG: three lines need no library.
import {el} from "./common.js";

const SVG = "http://www.w3.org/2000/svg";
const SERIES = [["pages", "pages/s"], ["items", "items/s"], ["errors", "errors/s"]];
const TICKS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200];
/** the shortest x axis: a crawl of a second or two still gets a readable axis */
const MIN_SPAN = 10;

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceStep(top) {
  const raw = top / 4, base = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map(m => m * base).find(s => s >= raw);
}

function rateLabel(v) { return `${Number(v.toPrecision(3)).toLocaleString("en")}/s`; }

/** The time range drawn: the chosen span, or the data's own when it is shorter. */
export function shownRange(series, frame) {
  const t1 = frame.now;
  const first = series.find(r => r.slice(1).some(v => typeof v === "number"));
  const start = first ? first[0] : t1;
  const span = Math.min(frame.span, Math.max(MIN_SPAN, t1 - start));
  return [t1 - span, t1, span];
}

function axes(svg, box, range, ymax, step) {
  const {left, top, w, h, height} = box;
  const [t0, t1, span] = range;
  const x = t => left + ((t - t0) / span) * w, y = v => top + h - (v / ymax) * h;
  const xAxis = svgEl("g", {class: "axis x"}), yAxis = svgEl("g", {class: "axis y"});
  xAxis.append(svgEl("line", {x1: left, x2: left + w, y1: top + h, y2: top + h}));
  yAxis.append(svgEl("line", {x1: left, x2: left, y1: top, y2: top + h}));
  const every = TICKS.find(s => span / s <= 6) ?? TICKS[TICKS.length - 1];
  const seconds = every < 60;  // a short span is labelled to the second
  for (let t = Math.ceil(t0 / every) * every; t <= t1; t += every) {
    xAxis.append(svgEl("line", {class: "tick", x1: x(t), x2: x(t), y1: top + h, y2: top + h + 3}));
    xAxis.append(svgEl("text", {x: x(t), y: height - 4, "text-anchor": "middle"},
                       new Date(t * 1000).toISOString().slice(11, seconds ? 19 : 16)));
  }
  for (let v = 0; v <= ymax + 1e-9; v += step) {
    yAxis.append(svgEl("line", {class: "grid", x1: left, x2: left + w, y1: y(v), y2: y(v)}));
    yAxis.append(svgEl("text", {x: left - 3, y: y(v) + 3, "text-anchor": "end"}, rateLabel(v)));
  }
  svg.append(yAxis, xAxis);
  return [x, y];
}

function lines(svg, series, range, frame, [x, y]) {
  const [t0, t1] = range;
  const gap = 2.5 * Math.max(frame.step, frame.interval);
  SERIES.forEach(([name], n) => {
    let points = [], prev = null;
    const flush = () => {
      if (points.length) svg.append(svgEl("polyline", {class: name, points: points.join(" ")}));
      points = [];
    };
    for (const row of series) {
      const [t, v] = [row[0], row[n + 1]];
      if (v == null || t < t0 || (prev !== null && t - prev > gap)) flush();
      if (v != null && t >= t0) points.push(`${x(Math.min(t, t1)).toFixed(1)},${y(v).toFixed(1)}`);
      prev = t;
    }
    flush();
  });
}

/** The latest reading of rate ``n`` (0: pages/s, 1: items/s, 2: errors/s), as the
 * legend and the Spiders table both show it: "-" when the latest read has none (a
 * finished or paused spider), not the last rate it had while it ran. */
export function reading(series, n) {
  const value = series.length ? series[series.length - 1][n + 1] : null;
  return typeof value === "number" ? Number(value.toPrecision(3)).toLocaleString("en") : "-";
}

/** ``frame``: {now, span, step, interval, label} of the history answer. */
export function chart(series, frame, width = 300, height = 96) {
  const box = {left: 48, top: 6, w: width - 56, h: height - 24, height};
  const range = shownRange(series, frame);
  const svg = svgEl("svg", {class: "chart", width, height, "data-span": frame.span,
                            "data-shown": Math.round(range[2])});
  const values = series.flatMap(r => r.slice(1)).filter(v => typeof v === "number");
  const step = niceStep(Math.max(1, ...values));
  const ymax = step * Math.max(1, Math.ceil(Math.max(1, ...values) / step));
  lines(svg, series, range, frame, axes(svg, box, range, ymax, step));
  svg.dataset.samples = String(series.filter(r => typeof r[1] === "number").length);
  const over = range[2] < frame.span ? `the ${Math.round(range[2])} s it ran` : `the last ${frame.label}`;
  svg.append(svgEl("title", {}, `pages/s, items/s and errors/s over ${over} (UTC)`));
  const legend = el("span", undefined, "legend");
  SERIES.forEach(([name, label], n) => legend.append(el("span", `${label} ${reading(series, n)}`, name)));
  const wrap = el("span", undefined, "chart-box");
  wrap.append(svg, legend);
  return wrap;
}
