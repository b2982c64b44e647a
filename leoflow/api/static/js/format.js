// Formatting of times, durations and states for display.

import { h } from "./dom.js";

export const TERMINAL_TASK_STATES = new Set(["success", "failed", "upstream_failed", "skipped", "cancelled"]);
/** Every task state in the order a task meets them (leoflow.model.states.TASK_STATES; a test keeps them equal). */
export const TASK_STATES = ["pending", "queued", "running", "up_for_retry", "cancelling", "waiting", "success", "failed",
  "upstream_failed", "skipped", "cancelled"];
export const TERMINAL_RUN_STATES = new Set(["success", "failed", "cancelled"]);

function pad(n) {
  return String(n).padStart(2, "0");
}

export function parseTime(value) {
  if (!value) return null;
  const t = new Date(value);
  return Number.isNaN(t.getTime()) ? null : t;
}

/** "2026-11-21 23:52:07" in the browser's local time zone. */
export function fmtTime(value) {
  const t = parseTime(value);
  if (!t) return "—";
  return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ` +
    `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}`;
}

/** "4m 05s", "1h 02m", "0.4s". */
export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  if (seconds < 0) seconds = 0;
  if (seconds < 10) return `${seconds.toFixed(1)}s`;
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad(s % 60)}s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs}h ${pad(m % 60)}m`;
  return `${Math.floor(hrs / 24)}d ${pad(hrs % 24)}h`;
}

/** Seconds between two timestamps (end defaults to now). */
export function secondsBetween(start, end) {
  const a = parseTime(start);
  if (!a) return null;
  const b = parseTime(end) || new Date();
  return (b.getTime() - a.getTime()) / 1000;
}

/** "12s ago", "in 3m". */
export function fmtRelative(value) {
  const t = parseTime(value);
  if (!t) return "—";
  const delta = (t.getTime() - Date.now()) / 1000;
  const text = fmtDuration(Math.abs(delta)).replace(/\.\d+s$/, "s");
  if (Math.abs(delta) < 1) return "just now";
  return delta < 0 ? `${text} ago` : `in ${text}`;
}

/** A <time> element showing a relative time with the absolute one as tooltip. */
export function timeEl(value, { relative = true } = {}) {
  const t = parseTime(value);
  if (!t) return h("span", { class: "muted", text: "—" });
  return h("time", { datetime: t.toISOString(), title: fmtTime(value) },
    relative ? fmtRelative(value) : fmtTime(value));
}

/** A coloured state badge. */
export function badge(state) {
  const name = state || "none";
  return h("span", { class: `badge st-${name}`, "data-state": name }, name.replace(/_/g, " "));
}

/** A schedule as the API shows it: the cron, "datasets all: s3://a, s3://b", or null (manual). */
export function scheduleText(schedule) {
  if (schedule === null || schedule === undefined || schedule === "") return null;
  if (typeof schedule === "string") return schedule;
  if (typeof schedule.datasets === "object" && schedule.datasets !== null) {
    const data = Object.entries(schedule.datasets).map(([mode, uris]) => `datasets ${mode}: ${[].concat(uris).join(", ")}`).join("; ");
    // A cron with datasets: "and" waits at each slot for the data, "or" runs on either.
    return schedule.cron ? `${schedule.cron} ${schedule.combine === "and" ? "and" : "or"} ${data}` : data;
  }
  return JSON.stringify(schedule);
}
