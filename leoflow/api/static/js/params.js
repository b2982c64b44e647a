// The trigger form generated from a DAG's `params` JSON Schema: one field per top-level
// property (text, number, checkbox, select for an enum, date picker for format: date, JSON for
// objects and arrays), defaults prefilled, required ones marked. The server validates again and
// answers 422 naming the path, which is shown next to the form.

import { h } from "./dom.js";

/** An example of each string format the server checks (leoflow/model/spec/params_formats.py), shown
 * as the field's placeholder: "2026-11-01 09:30" is not a date-time there, and the form says so
 * before the 422 does. (date has the browser's date picker.) */
const FORMAT_EXAMPLES = {
  "date-time": "2026-11-01T09:30:00Z", time: "09:30:00Z", email: "name@example.com", hostname: "db.example.com",
  ipv4: "192.0.2.10", ipv6: "2001:db8::10", uri: "https://example.com/path", "uri-reference": "/path?query",
  uuid: "123e4567-e89b-12d3-a456-426614174000",
};

function typeOf(schema) {
  const t = Array.isArray(schema.type) ? schema.type.find((x) => x !== "null") : schema.type;
  if (Array.isArray(schema.enum)) return "enum";
  return t || "json";
}

function field(name, schema, required) {
  const kind = typeOf(schema);
  const id = `param-${name}`;
  const has = Object.prototype.hasOwnProperty.call(schema, "default");
  const attrs = { id, name, "data-testid": id, "data-kind": kind };
  let input;
  if (kind === "boolean") {
    input = h("input", { ...attrs, type: "checkbox", checked: has ? Boolean(schema.default) : false });
  } else if (kind === "enum") {
    input = h("select", attrs,
      required ? null : h("option", { value: "" }, "—"),
      schema.enum.map((v) => h("option", { value: JSON.stringify(v), selected: has && schema.default === v }, String(v))));
  } else if (kind === "integer" || kind === "number") {
    input = h("input", { ...attrs, type: "number", step: kind === "integer" ? "1" : "any", min: schema.minimum,
      max: schema.maximum, value: has ? String(schema.default) : "" });
  } else if (kind === "string") {
    const type = schema.format === "date" ? "date" : "text";
    input = h("input", { ...attrs, type, spellcheck: "false", maxlength: schema.maxLength, value: has ? schema.default : "",
      placeholder: FORMAT_EXAMPLES[schema.format] ? `e.g. ${FORMAT_EXAMPLES[schema.format]}` : undefined });
  } else {
    input = h("textarea", { ...attrs, rows: 3, spellcheck: "false" }, has ? JSON.stringify(schema.default, null, 2) : "");
  }
  const label = schema.title || name;
  return {
    name, kind, input, required,
    el: h("label", { class: "param" }, `${label}${required ? " *" : ""}`, input,
      schema.description ? h("span", { class: "hint muted" }, schema.description) : null),
  };
}

function read(f) {
  const { kind, input } = f;
  if (kind === "boolean") return { set: true, value: input.checked };
  const raw = input.value;
  if (raw === "" || raw === undefined) return { set: false };
  if (kind === "enum") return { set: true, value: JSON.parse(raw) };
  if (kind === "integer" || kind === "number") {
    const n = Number(raw);
    if (Number.isNaN(n)) throw new Error(`conf.${f.name}: not a number`);
    return { set: true, value: n };
  }
  if (kind === "string") return { set: true, value: raw };
  try {
    return { set: true, value: JSON.parse(raw) };
  } catch (err) {
    throw new Error(`conf.${f.name}: not valid JSON (${err.message})`);
  }
}

/** {el, value()} for a schema with properties; null when the schema describes no fields. */
export function paramsForm(schema) {
  const properties = schema && typeof schema.properties === "object" ? schema.properties : null;
  if (!properties || !Object.keys(properties).length) return null;
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(properties).filter(([, s]) => s && typeof s === "object")
    .map(([name, s]) => field(name, s, required.has(name)));
  return {
    el: h("fieldset", { class: "params", "data-testid": "params-form" }, h("legend", {}, "Parameters"),
      fields.map((f) => f.el)),
    /** The conf: fields left empty are omitted (the server fills their defaults). */
    value() {
      const conf = {};
      for (const f of fields) {
        const got = read(f);
        if (got.set) conf[f.name] = got.value;
      }
      return conf;
    },
  };
}
