package console

import (
	"io/fs"
	"net/http"
)

// contentSecurityPolicy lets a page load only the console's own styles and
// script, and no page be framed or post elsewhere.
const contentSecurityPolicy = "default-src 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'; form-action 'self'"

// securityHeaders sets the headers every response carries. Responses are
// not stored by default: pages hold mail data; the static files lift it.
func securityHeaders(h http.Header, secure bool) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
}

// staticFiles serves the style sheet and the time script, which hold no
// data and may be cached for an hour.
func staticFiles(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
