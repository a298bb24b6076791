// Package dash is the master's web dashboard (issue 16): static HTML, CSS
// and JavaScript embedded in the binary — no framework, no build step, no
// CDN. The page polls the master's /api/v1/status document once a second
// and draws the capacity map, clients, rates and errors from it; rates are
// computed by the master (internal/master/status.go), the page only keeps a
// short history of them for its sparklines.
package dash

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard's files (index.html at /). It is safe for
// concurrent use and never changes anything.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page loads only its own files and fetches only its origin.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
