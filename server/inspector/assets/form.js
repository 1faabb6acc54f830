// Forms built from the protocol's request schemas (the contract bundle the
// host serves at /inspector/api/contract, generated from schemas/), and a
// validator of the same schemas, so that a message is checked before it is
// sent. A field the form cannot render as inputs (a value of several
// types, a free object, a oneOf) is a JSON editor validated against that
// field's schema. Everything is written with textContent.
"use strict";

const AEPForm = (() => {
  let defs = {};
  // The envelope is filled by the page (id, proto, ts, type) or is not an
  // agent's to set (req_id); traceparent is optional and rarely typed.
  const ENVELOPE = new Set(["id", "proto", "ts", "type", "req_id", "traceparent"]);

  function load(bundle) { defs = bundle.$defs || {}; }

  function resolve(s) {
    let n = 0;
    while (s && s.$ref && n++ < 32) s = defs[s.$ref.replace("#/$defs/", "")];
    return s || {};
  }

  // requestTypes lists the message types an agent sends, with their
  // schema names, from AgentMessage: a union dispatched on type, written
  // as allOf of if/then (one branch per type) or as oneOf.
  function requestTypes() {
    const out = [];
    const u = defs.AgentMessage || {};
    const refs = (u.allOf || []).map((b) => b.then).concat(u.oneOf || []);
    for (const r of refs) {
      if (!r || !r.$ref) continue;
      const name = r.$ref.replace("#/$defs/", "");
      const s = defs[name];
      const t = s && s.properties && s.properties.type && s.properties.type.const;
      if (t && t !== "handshake/req") out.push({ type: t, name: name });
    }
    out.sort((a, b) => a.type.localeCompare(b.type));
    return out;
  }

  function typeOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "array";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    return typeof v;
  }

  function typeMatches(want, v) {
    const got = typeOf(v);
    return want === got || (want === "number" && got === "integer");
  }

  function eq(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

  // validate checks v against schema s (the keywords schemas/ uses) and
  // returns the errors, each "path: what".
  function validate(s, v, path, errs) {
    errs = errs || [];
    path = path || "";
    s = resolve(s);
    const at = path || "(message)";
    if (s.type !== undefined) {
      const types = Array.isArray(s.type) ? s.type : [s.type];
      if (!types.some((t) => typeMatches(t, v))) {
        errs.push(at + ": want " + types.join(" or ") + ", not " + typeOf(v));
        return errs;
      }
    }
    if (s.const !== undefined && !eq(s.const, v)) errs.push(at + ": want " + JSON.stringify(s.const));
    if (s.enum && !s.enum.some((e) => eq(e, v))) errs.push(at + ": want one of " + s.enum.map((e) => JSON.stringify(e)).join(", "));
    if (typeof v === "string") {
      const n = [...v].length;
      if (s.minLength !== undefined && n < s.minLength) errs.push(at + (s.minLength === 1 ? ": required, must not be empty" : ": at least " + s.minLength + " characters"));
      if (s.maxLength !== undefined && n > s.maxLength) errs.push(at + ": at most " + s.maxLength + " characters");
      if (s.pattern) {
        try { if (!new RegExp(s.pattern, "u").test(v)) errs.push(at + ": must match " + s.pattern); } catch (e) { /* a pattern JS cannot read: the host checks it */ }
      }
    }
    if (typeof v === "number") {
      if (s.minimum !== undefined && v < s.minimum) errs.push(at + ": at least " + s.minimum);
      if (s.maximum !== undefined && v > s.maximum) errs.push(at + ": at most " + s.maximum);
      if (s.exclusiveMinimum !== undefined && v <= s.exclusiveMinimum) errs.push(at + ": more than " + s.exclusiveMinimum);
      if (s.exclusiveMaximum !== undefined && v >= s.exclusiveMaximum) errs.push(at + ": less than " + s.exclusiveMaximum);
    }
    if (Array.isArray(v)) {
      if (s.minItems !== undefined && v.length < s.minItems) errs.push(at + ": at least " + s.minItems + " items");
      if (s.maxItems !== undefined && v.length > s.maxItems) errs.push(at + ": at most " + s.maxItems + " items");
      if (s.items) v.forEach((x, i) => validate(s.items, x, path + "[" + i + "]", errs));
    }
    if (typeOf(v) === "object") {
      for (const k of s.required || []) if (!(k in v)) errs.push((path ? path + "." : "") + k + ": required");
      const props = s.properties || {};
      for (const k of Object.keys(v)) {
        const p = path ? path + "." + k : k;
        if (props[k]) validate(props[k], v[k], p, errs);
        else if (s.additionalProperties === false) errs.push(p + ": not a field of this message");
        else if (s.additionalProperties && typeof s.additionalProperties === "object") validate(s.additionalProperties, v[k], p, errs);
      }
      if (s.minProperties !== undefined && Object.keys(v).length < s.minProperties) errs.push(at + ": at least " + s.minProperties + " fields");
      if (s.maxProperties !== undefined && Object.keys(v).length > s.maxProperties) errs.push(at + ": at most " + s.maxProperties + " fields");
    }
    if (s.allOf) s.allOf.forEach((x) => validate(x, v, path, errs));
    if (s.anyOf && !s.anyOf.some((x) => validate(x, v, path).length === 0)) errs.push(at + ": matches none of its forms");
    if (s.oneOf) {
      const n = s.oneOf.filter((x) => validate(x, v, path).length === 0).length;
      if (n !== 1) errs.push(at + (n === 0 ? ": matches none of its forms" : ": matches more than one of its forms"));
    }
    if (s.not && validate(s.not, v, path).length === 0) errs.push(at + ": a form it must not have");
    // if/then/else: the bundle's dispatch on a discriminator.
    if (s.if !== undefined) {
      const branch = validate(s.if, v, path).length === 0 ? s.then : s.else;
      if (branch !== undefined) validate(branch, v, path, errs);
    }
    return errs;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // renderable says whether s is drawn as inputs; the rest is JSON.
  function renderable(s) {
    s = resolve(s);
    if (s.oneOf || s.anyOf || s.allOf || Array.isArray(s.type)) return false;
    switch (s.type) {
      case "string": case "integer": case "number": case "boolean": return true;
      case "object": return !!s.properties && Object.keys(s.properties).length > 0;
      case "array": return !!s.items && renderable(s.items);
    }
    return false;
  }

  // A field is {el, get()}: get returns undefined when the field is left
  // empty (it is then not sent), or {error} for text the field cannot read.
  function field(s, name, required, path) {
    s = resolve(s);
    if (!renderable(s)) return jsonField(s, name, required, path);
    if (s.type === "object") return objectField(s, name, required, path);
    if (s.type === "array") return arrayField(s, name, required, path);
    return scalarField(s, name, required, path);
  }

  function label(name, required, s) {
    const l = el("span", "fname", name + (required ? " *" : ""));
    if (s.description) l.title = s.description;
    return l;
  }

  function scalarField(s, name, required, path) {
    const box = el("label", "field");
    box.appendChild(label(name, required, s));
    let input;
    if (s.enum || s.type === "boolean") {
      input = el("select");
      const opts = s.enum ? s.enum.slice() : [true, false];
      if (!required || s.default === undefined) input.appendChild(el("option", "", "")).value = "";
      for (const o of opts) {
        const op = el("option", "", String(o));
        op.value = JSON.stringify(o);
        input.appendChild(op);
      }
      if (s.default !== undefined) input.value = JSON.stringify(s.default);
    } else {
      input = el("input");
      if (s.type === "integer" || s.type === "number") {
        input.type = "number";
        input.step = s.type === "integer" ? "1" : "any";
      } else input.type = "text";
      if (s.const !== undefined) { input.value = String(s.const); input.readOnly = true; }
      else if (s.default !== undefined) input.value = String(s.default);
      if (s.description) input.placeholder = s.description.slice(0, 80);
    }
    input.dataset.path = path;
    input.name = path;
    box.appendChild(input);
    return {
      el: box,
      get() {
        const t = input.value;
        if (t === "") return undefined;
        if (input.tagName === "SELECT") return { value: JSON.parse(t) };
        if (s.type === "integer" || s.type === "number") {
          const n = Number(t);
          if (t.trim() === "" || !Number.isFinite(n)) return { error: path + ": not a number" };
          return { value: n };
        }
        return { value: t };
      },
      set(v) { input.value = input.tagName === "SELECT" ? JSON.stringify(v) : String(v); },
    };
  }

  function jsonField(s, name, required, path) {
    const box = el("div", "field json");
    box.appendChild(label(name, required, s));
    const area = el("textarea");
    area.rows = 2;
    area.dataset.path = path;
    area.name = path;
    area.placeholder = "JSON" + (s.type ? " (" + [].concat(s.type).join(" | ") + ")" : "");
    if (s.default !== undefined) area.value = JSON.stringify(s.default);
    const note = el("span", "fnote");
    box.appendChild(area);
    box.appendChild(note);
    const check = () => {
      note.textContent = "";
      if (area.value.trim() === "") return;
      try {
        const errs = validate(s, JSON.parse(area.value), path);
        note.textContent = errs.join("; ");
      } catch (e) { note.textContent = "not JSON: " + e.message; }
    };
    area.addEventListener("input", check);
    return {
      el: box,
      get() {
        if (area.value.trim() === "") return undefined;
        try { return { value: JSON.parse(area.value) }; } catch (e) { return { error: path + ": not JSON: " + e.message }; }
      },
      set(v) { area.value = JSON.stringify(v); check(); },
    };
  }

  function objectField(s, name, required, path, top) {
    const box = el(top ? "div" : "fieldset", top ? "fields" : "field object");
    if (!top) box.appendChild(el("legend", "", name + (required ? " *" : ""))).title = s.description || "";
    const req = new Set(s.required || []);
    const kids = [];
    const names = Object.keys(s.properties || {}).filter((k) => !(top && ENVELOPE.has(k)));
    // Required fields first, then the rest, each in the schema's order.
    names.sort((a, b) => (req.has(b) ? 1 : 0) - (req.has(a) ? 1 : 0));
    for (const k of names) {
      const f = field(s.properties[k], k, req.has(k), path ? path + "." + k : k);
      kids.push([k, f]);
      box.appendChild(f.el);
    }
    return {
      el: box,
      get() {
        const out = {};
        let any = false;
        for (const [k, f] of kids) {
          const g = f.get();
          if (g === undefined) continue;
          if (g.error) return g;
          out[k] = g.value;
          any = true;
        }
        if (!any && !required && !top) return undefined;
        return { value: out };
      },
      set(v) {
        for (const [k, f] of kids) if (v && v[k] !== undefined && f.set) f.set(v[k]);
      },
    };
  }

  function arrayField(s, name, required, path) {
    const box = el("fieldset", "field array");
    box.appendChild(el("legend", "", name + (required ? " *" : ""))).title = s.description || "";
    const list = el("div", "items");
    box.appendChild(list);
    const items = [];
    const add = el("button", "add", "+ add to " + name);
    add.type = "button";
    add.dataset.path = path;
    const addItem = () => {
      const i = items.length;
      const row = el("div", "item");
      const f = field(s.items, name + "[" + i + "]", true, path + "[" + i + "]");
      const rm = el("button", "remove", "×");
      rm.type = "button";
      rm.title = "remove";
      const it = { f, row };
      rm.addEventListener("click", () => { items.splice(items.indexOf(it), 1); row.remove(); });
      row.appendChild(f.el);
      row.appendChild(rm);
      list.appendChild(row);
      items.push(it);
      return f;
    };
    add.addEventListener("click", addItem);
    box.appendChild(add);
    return {
      el: box,
      get() {
        const out = [];
        for (const { f } of items) {
          const g = f.get();
          if (g && g.error) return g;
          out.push(g === undefined ? (resolve(s.items).type === "object" ? {} : null) : g.value);
        }
        if (out.length === 0 && !required) return undefined;
        return { value: out };
      },
      set(v) {
        while (items.length) items.pop().row.remove();
        for (const x of v || []) { const f = addItem(); if (f.set) f.set(x); }
      },
    };
  }

  // form builds the form of one message type: {el, message()} where
  // message returns {message} or {errors}.
  function form(name) {
    const s = resolve({ $ref: "#/$defs/" + name });
    const type = s.properties.type.const;
    const f = objectField(s, type, true, "", true);
    return {
      el: f.el,
      type,
      schema: s,
      set: f.set,
      message(envelope) {
        const g = f.get();
        if (g.error) return { errors: [g.error] };
        const m = Object.assign({ type }, envelope, g.value);
        const errs = validate(s, m, "");
        return errs.length ? { errors: errs } : { message: m };
      },
    };
  }

  return { load, requestTypes, form, validate, resolve };
})();
