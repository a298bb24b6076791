package master

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kvfabric/kvfabric/internal/master/dash"
)

// StatusPath is where the HTTP handler serves the Status document.
const StatusPath = "/api/v1/status"

// HTTPHandler is the master's HTTP (metrics) listener: metrics (a
// Prometheus handler; none when nil) at /metrics, the Status of the Service svc
// returns at StatusPath (503 while svc returns nil: an HA master standing
// by), and the dashboard (package dash) at /.
//
// It is read-only: only GET and HEAD are served, and nothing it calls
// changes the Service. Callers are authenticated as gRPC callers are (auth,
// nil: no authentication): a client certificate verified by the TLS
// listener, a bearer token ("Authorization: Bearer <token>"), or — for
// browsers, which prompt for it — HTTP basic authentication whose password
// is the token (the user name is ignored). With auth.Require, requests
// without a credential are refused with 401; any principal, client or
// admin, may read. Serve it over TLS (tls.NewListener with the master's
// ServerTLS) whenever tokens are in use.
func HTTPHandler(svc func() *Service, metrics http.Handler, auth *Authenticator) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, r *http.Request) {
		s := svc()
		if s == nil {
			http.Error(w, errStatusUnavailable.Error(), http.StatusServiceUnavailable)
			return
		}
		st, err := s.Status(r.Context())
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrClosed) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(&st)
	})
	mux.Handle("GET /", dash.Handler())
	return authHTTP(auth, mux)
}

// authHTTP admits a request as NewServerAuth admits a gRPC call.
func authHTTP(auth *Authenticator, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "master: the HTTP listener is read-only", http.StatusMethodNotAllowed)
			return
		}
		if auth != nil {
			p, err := auth.httpPrincipal(r)
			if err == nil && p.Name == "" && auth.Require {
				err = fmt.Errorf("%w: %s needs a client certificate or a bearer token", ErrUnauthenticated, r.URL.Path)
			}
			if err != nil {
				// Browsers prompt for basic credentials: the password is
				// the bearer token.
				w.Header().Set("WWW-Authenticate", `Basic realm="kvfabric master (password: bearer token)", charset="UTF-8"`)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			if p.Name != "" {
				r = r.WithContext(WithPrincipal(r.Context(), p))
			}
		}
		h.ServeHTTP(w, r)
	})
}

// httpPrincipal finds the caller of an HTTP request: a verified client
// certificate first, then a bearer token, then a token as the password of
// basic authentication.
func (a *Authenticator) httpPrincipal(r *http.Request) (Principal, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return certPrincipal(r.TLS.VerifiedChains[0][0])
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return a.tokenPrincipal(tok)
	}
	if _, pw, ok := r.BasicAuth(); ok {
		return a.tokenPrincipal(pw)
	}
	return Principal{}, nil
}

// tokenPrincipal returns the principal of bearer token tok, comparing it
// with every token, always, in constant time per token.
func (a *Authenticator) tokenPrincipal(tok string) (Principal, error) {
	var found Principal
	for _, e := range a.tokens {
		if subtle.ConstantTimeCompare(e.token, []byte(tok)) == 1 {
			found = e.p
		}
	}
	if found.Name == "" {
		return Principal{}, fmt.Errorf("%w: unknown bearer token", ErrUnauthenticated)
	}
	return found, nil
}

// Service returns the Service of the term r leads, nil while it stands by.
func (r *Router) Service() *Service {
	if t := r.cur.Load(); t != nil {
		return t.g.svc
	}
	return nil
}

// HTTPClient returns an HTTP client for a master's HTTP listener secured
// as c says (see DialOptions): TLS with c's CA and client certificate, and
// c's token as a bearer token on every request. Without security options
// it returns a plain client; scheme is "https" or "http" accordingly.
func (c ClientSecurity) HTTPClient() (cl *http.Client, scheme string, err error) {
	if !c.Enabled() {
		return &http.Client{}, "http", nil
	}
	tc, tok, err := c.tlsAndToken()
	if err != nil {
		return nil, "", err
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tc}
	if tok != "" {
		rt = bearerTransport{tok: tok, rt: rt}
	}
	return &http.Client{Transport: rt}, "https", nil
}

type bearerTransport struct {
	tok string
	rt  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.rt.RoundTrip(r)
}

var _ http.RoundTripper = bearerTransport{}
