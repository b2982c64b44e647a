// Cluster view: the leader (node, term, since), every replica's heartbeat and version, and a
// timeline of leadership changes and other cluster events.

import { api, items } from "../api.js";
import { fill, h, s } from "../dom.js";
import { fmtTime, timeEl } from "../format.js";
import { section, table } from "../ui.js";

const EVENT_LIMIT = 50;

function eventClass(kind) {
  if (/elected|acquired/.test(kind)) return "ev-good";
  if (/lost|fenced|stall|down|left|fail|rejected/.test(kind)) return "ev-bad";
  return "ev-neutral";
}

function detailsText(details) {
  if (!details || typeof details !== "object") return "";
  return Object.entries(details).map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
}

/** A strip of leadership terms over the window of the events shown (newest right). */
function termStrip(events) {
  const elected = events.filter((e) => /elected|acquired/.test(e.kind)).sort((a, b) => new Date(a.ts) - new Date(b.ts));
  if (!elected.length) return null;
  const start = new Date(elected[0].ts).getTime();
  const end = Date.now();
  const span = Math.max(end - start, 1000);
  const nodes = [...new Set(elected.map((e) => e.node_id))];
  const palette = ["#2f6fb0", "#2e8b57", "#b5651d", "#7b4fa0", "#a33b4b", "#3b8686"];
  const width = 1000;
  const bars = elected.map((e, i) => {
    const x0 = ((new Date(e.ts).getTime() - start) / span) * width;
    const next = elected[i + 1];
    // The term ends at the next election or at a loss/release event of the same term.
    const endEvent = events.find((x) => x.term === e.term && /lost|released|fenced|ended/.test(x.kind));
    const tEnd = endEvent ? new Date(endEvent.ts).getTime() : next ? new Date(next.ts).getTime() : end;
    const x1 = ((tEnd - start) / span) * width;
    const color = palette[nodes.indexOf(e.node_id) % palette.length];
    return s("g", {},
      s("rect", { x: x0.toFixed(1), y: 0, width: Math.max(x1 - x0, 2).toFixed(1), height: 22, fill: color, rx: 3 },
        s("title", {}, `term ${e.term}: ${e.node_id} from ${fmtTime(e.ts)}`)),
      x1 - x0 > 60 ? s("text", { x: (x0 + 6).toFixed(1), y: 15, class: "strip-label" }, `t${e.term}`) : null);
  });
  return h("div", { class: "term-strip", "data-testid": "term-strip" },
    s("svg", { viewBox: `0 0 ${width} 22`, preserveAspectRatio: "none", role: "img",
      "aria-label": "Leadership terms over time" }, bars),
    h("div", { class: "strip-legend" }, nodes.map((n, i) =>
      h("span", {}, h("i", { class: "swatch", style: { background: palette[i % palette.length] } }), n))));
}

export default {
  title: () => "Cluster",
  mount(root, _params, ctx) {
    const leader = section("Leader", { testid: "leader" });
    const nodes = section("Replicas", { testid: "nodes" });
    const events = section("Timeline", { testid: "events" });
    fill(root, h("h1", {}, "Cluster"), h("div", { class: "grid-2" }, leader.el, nodes.el), events.el);

    return {
      async refresh() {
        const [leaderResp, nodesResp, eventsResp] = await Promise.all([
          // 503 no_leader while an election is in progress: show it, keep polling.
          api("/cluster/leader").catch((err) => { if (err.code === "no_leader" || err.status === 404) return null; throw err; }),
          api("/cluster/nodes"),
          api("/cluster/events", { query: { limit: EVENT_LIMIT } }),
        ]);
        if (!ctx.isCurrent()) return;
        const lead = leaderResp && (leaderResp.leader !== undefined ? leaderResp.leader : leaderResp);
        if (lead && lead.node_id) {
          fill(leader.body, h("dl", { class: "facts" },
            h("dt", {}, "Node"), h("dd", { "data-testid": "leader-node" }, h("strong", {}, lead.node_id)),
            h("dt", {}, "Term"), h("dd", { "data-testid": "leader-term" }, String(lead.term)),
            h("dt", {}, "Since"), h("dd", {}, timeEl(lead.since), h("span", { class: "muted" }, ` (${fmtTime(lead.since)})`)),
            lead.api_url ? [h("dt", {}, "API"), h("dd", { class: "mono" }, lead.api_url)] : null));
        } else {
          fill(leader.body, h("p", { class: "warn", "data-testid": "no-leader" },
            "No leader right now — an election is in progress or no replica can reach the database."));
        }
        const nodeRows = items(nodesResp, "nodes");
        fill(nodes.body, table([
          { title: "Node", cell: (n) => [h("span", { class: "mono" }, n.node_id), n.is_leader ? h("span", { class: "tag tag-leader" }, "leader") : null] },
          { title: "State", cell: (n) => h("span", { class: `badge node-${n.state || "up"}` }, n.state || "up") },
          { title: "Heartbeat", cell: (n) => timeEl(n.last_seen) },
          { title: "Version", cell: (n) => n.version || "—" },
          { title: "Started", class: "opt", cell: (n) => timeEl(n.started_at) },
          { title: "API", class: "opt mono", cell: (n) => n.api_url || "—" },
        ], nodeRows, { empty: "No replica has sent a heartbeat.", testid: "nodes-table" }));

        const evs = items(eventsResp, "events");
        fill(events.body,
          termStrip(evs),
          evs.length ? h("ol", { class: "timeline", "data-testid": "timeline" }, evs.map((e) =>
            h("li", { class: eventClass(e.kind || "") },
              h("span", { class: "dot", "aria-hidden": "true" }),
              h("span", { class: "when" }, timeEl(e.ts, { relative: false })),
              h("span", { class: "what" }, h("strong", {}, e.kind),
                e.node_id ? h("span", { class: "mono" }, ` ${e.node_id}`) : null,
                e.term !== null && e.term !== undefined ? h("span", { class: "muted" }, ` term ${e.term}`) : null,
                detailsText(e.details) ? h("span", { class: "details muted" }, ` ${detailsText(e.details)}`) : null))))
            : h("p", { class: "empty muted" }, "No cluster events yet."));
      },
    };
  },
};
