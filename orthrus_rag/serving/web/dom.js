// A small helper to build elements: el("div", {class: "x"}, "text", child, ...).

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

export function seconds(value) {
  return `${value.toFixed(value < 10 ? 2 : 1)} s`;
}
