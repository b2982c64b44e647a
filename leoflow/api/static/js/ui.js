// Shared view pieces: tables, sections, notices, two-step confirm buttons.

import { fill, h } from "./dom.js";

/**
 * A table. columns: [{title, cell(row) -> Node|string, class?}]. On a phone each row becomes a
 * card whose cells are labelled by their column's title (data-label; app.css), so no column and
 * no action button is cut off at the right edge.
 */
export function table(columns, rows, { empty = "Nothing yet.", testid, rowAttrs } = {}) {
  if (!rows.length) return h("p", { class: "empty muted", "data-testid": testid ? `${testid}-empty` : undefined }, empty);
  return h("div", { class: "table-wrap" },
    h("table", { class: "data-table", "data-testid": testid },
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.class }, c.title)))),
      h("tbody", {}, rows.map((row) => h("tr", rowAttrs ? rowAttrs(row) : {},
        columns.map((c) => h("td", { class: c.class, "data-label": c.title }, c.cell(row))))))));
}

/** A titled card whose body is returned for filling. */
export function section(title, { testid, actions } = {}) {
  const body = h("div", { class: "section-body" });
  const el = h("section", { class: "card", "data-testid": testid },
    h("div", { class: "section-head" }, h("h2", {}, title), actions || null), body);
  return { el, body };
}

/** An inline error/notice line that can be set and cleared. */
export function notice() {
  const el = h("p", { class: "notice", role: "status", hidden: true });
  return {
    el,
    set(text, kind = "error") {
      el.hidden = !text;
      el.className = `notice notice-${kind}`;
      el.textContent = text || "";
    },
  };
}

/**
 * A button that asks for confirmation in place (no window.confirm, which blocks polling and
 * automation): first click shows "Confirm"/"Keep", the second runs action.
 */
export function confirmButton(label, confirmLabel, action, { testid, danger = true } = {}) {
  const wrap = h("span", { class: "confirm" });
  const idle = () => {
    delete wrap.dataset.open;
    fill(wrap, h("button", {
      type: "button", class: danger ? "danger" : "primary", "data-testid": testid,
      onclick: () => {
        wrap.dataset.open = "1";
        fill(wrap,
          h("button", { type: "button", class: danger ? "danger" : "primary", "data-testid": `${testid}-confirm`,
            onclick: async (e) => {
              e.target.disabled = true;
              delete wrap.dataset.open; // answered: the refresh after the action may redraw it
              try { await action(); } finally { idle(); }
            } },
          confirmLabel),
          h("button", { type: "button", class: "secondary", onclick: idle }, "Keep"));
      },
    }, label));
  };
  idle();
  return wrap;
}

/**
 * Is a confirmation waiting for its answer inside ``el``? A poll must not redraw it away: the
 * run page redraws its task table every 1.5 s while the run is active, and a "Yes, success"
 * that vanishes before the operator (or a slow browser) can press it is a button that does not work.
 */
export function confirmOpen(el) {
  return el.querySelector(".confirm[data-open]") !== null;
}

/** Breadcrumbs: [[label, href], ..., label]. */
export function crumbs(...parts) {
  return h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
    parts.map((p, i) => [i ? h("span", { class: "sep", "aria-hidden": "true" }, "›") : null,
      Array.isArray(p) ? h("a", { href: p[1] }, p[0]) : h("span", { class: "here" }, p)]));
}

/** A labelled value in a facts row. */
export function fact(label, value) {
  return h("div", { class: "fact" }, h("span", { class: "fact-label" }, label), h("span", { class: "fact-value" }, value));
}

/**
 * Re-render only when the data changed (or every maxAgeMs, so relative times stay fresh):
 * rebuilding a table on every poll would swallow clicks and reset focus for nothing.
 */
export function changeGate(maxAgeMs = 15000) {
  let lastKey = null;
  let lastAt = 0;
  return (data) => {
    const key = JSON.stringify(data);
    const now = Date.now();
    if (key === lastKey && now - lastAt < maxAgeMs) return false;
    lastKey = key;
    lastAt = now;
    return true;
  };
}
