// The search page's keyboard shortcuts: an enhancement only, searching needs no script.
// "/" anywhere but in a field goes to the search box; after a query that does not parse, the
// text cursor waits at the problem.
"use strict";

document.addEventListener("keydown", (event) => {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target instanceof Element && (target.closest("input, textarea, select") || target.isContentEditable)) return;
  const box = document.getElementById("q");
  if (box === null) return;
  event.preventDefault();
  box.focus();
  box.select();
});

document.addEventListener("DOMContentLoaded", () => {
  for (const hint of document.querySelectorAll(".keys")) hint.hidden = false;
  const box = document.getElementById("q");
  if (box === null || box.dataset.errorAt === undefined) return;
  const at = Number(box.dataset.errorAt);
  box.focus();
  box.setSelectionRange(at, at);
});
