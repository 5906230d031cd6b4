// Package compose owns turning a template request (name, requested version,
// data, locale) into finished mail bodies. It reads the template's labels
// from an in-memory snapshot, lets render.Plan order the versions to try
// (the chosen version by canary hash or request, then the fallback label,
// then the active one), fetches each version from the template store once
// and compiles it once per (name, version), wraps it in its layout (the
// layout template's active version, or a built-in layout), and renders the
// plan with render.RenderWithFallback. When every stored version fails, a
// built-in template of the same name is the last resort; a template absent
// from the store is served by its built-in versions (the highest one
// active).
//
// Failures come in two kinds: a render failure (every version tried failed,
// or there is no version at all), a *RenderError whose Reason is
// "render_failed" and that no retry fixes; and a store failure (the
// database is out of reach), which wraps ErrUnavailable and is worth a
// retry.
package compose
