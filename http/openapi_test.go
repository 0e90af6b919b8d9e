package http

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
)

// openAPI is the embedded document, loaded and validated once, and a mux of
// its operations that routes a request as the server's mux does.
var openAPI = sync.OnceValues(func() (*openAPISpec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDoc)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, err
	}
	spec := &openAPISpec{doc: doc, mux: http.NewServeMux()}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			spec.mux.HandleFunc(method+" "+muxPath(path), func(w http.ResponseWriter, r *http.Request) {
				m := w.(*matchWriter)
				m.path, m.params = path, map[string]string{}
				for _, p := range item.GetOperation(method).Parameters {
					if p.Value.In == openapi3.ParameterInPath {
						m.params[p.Value.Name] = r.PathValue(p.Value.Name)
					}
				}
			})
		}
	}
	return spec, nil
})

// muxPath is the ServeMux pattern of a path of the document: "/" alone is
// "/{$}" in the mux, where "/" would match every path.
func muxPath(path string) string {
	if path == "/" {
		return "/{$}"
	}
	return path
}

type openAPISpec struct {
	doc *openapi3.T
	mux *http.ServeMux
}

// matchWriter takes the match of openAPISpec.mux.
type matchWriter struct {
	httptest.ResponseRecorder
	path   string
	params map[string]string
}

// route returns the document's route of req, or nil if it has none (a
// path that is no route, a method the path does not take).
func (s *openAPISpec) route(req *http.Request) (*routers.Route, map[string]string) {
	m := &matchWriter{}
	s.mux.ServeHTTP(m, req)
	if m.path == "" {
		return nil, nil
	}
	item := s.doc.Paths.Value(m.path)
	return &routers.Route{Spec: s.doc, Path: m.path, PathItem: item, Method: req.Method, Operation: item.GetOperation(req.Method)}, m.params
}

// checkOpenAPI checks an answer against the OpenAPI document, failing t.
func checkOpenAPI(t *testing.T, req *http.Request, body []byte, res response) {
	t.Helper()
	for _, err := range openAPIErrors(req, body, res) {
		t.Error(err)
	}
}

// openAPIErrors checks an answer against the OpenAPI document: its status
// is documented for its route, its headers and body match their schemas,
// and the request of a successful answer matches the request's schemas
// too. An answer of no route must be a 404 or a 405 error.
func openAPIErrors(req *http.Request, body []byte, res response) []error {
	spec, err := openAPI()
	if err != nil {
		return []error{fmt.Errorf("openapi.json: %w", err)}
	}
	route, params := spec.route(req)
	if route == nil {
		if res.status != http.StatusNotFound && res.status != http.StatusMethodNotAllowed {
			return []error{fmt.Errorf("%s %s is in no route of openapi.json, yet answered %d", req.Method, req.URL.Path, res.status)}
		}
		return nil
	}
	var errs []error
	if res.status < 400 && route.Operation.Responses.Status(res.status) == nil {
		errs = append(errs, fmt.Errorf("%s %s answered %d, which openapi.json does not list for %s %s", req.Method, req.URL, res.status, req.Method, route.Path))
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	ctx := context.Background()
	if res.status < 400 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			errs = append(errs, fmt.Errorf("%s %s succeeded (%d) with a request openapi.json refuses: %w", req.Method, req.URL, res.status, err))
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 res.status,
		Header:                 res.header,
		Body:                   io.NopCloser(bytes.NewReader(res.raw)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		errs = append(errs, fmt.Errorf("%s %s: the answer %d %s does not match openapi.json: %w", req.Method, req.URL, res.status, res.raw, err))
	}
	return errs
}

// TestOpenAPIRefuses: the check of answers against the document finds
// answers that do not match it.
func TestOpenAPIRefuses(t *testing.T) {
	t.Parallel()
	jsonHeader := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	voucher := `{"id":"7","title":"t","stock":1,"remaining":null,"beginTime":"2026-12-01T12:00:00Z","endTime":"2026-12-01T13:00:00Z"}`
	for name, tc := range map[string]struct {
		method, path, body string
		res                response
	}{
		"an id as a number": {"GET", "/api/vouchers/7", "", response{status: 200, header: jsonHeader,
			raw: []byte(strings.Replace(voucher, `"id":"7"`, `"id":7`, 1))}},
		"a field missing": {"GET", "/api/vouchers/7", "", response{status: 200, header: jsonHeader,
			raw: []byte(strings.Replace(voucher, `"remaining":null,`, ``, 1))}},
		"a field too many": {"GET", "/api/vouchers/7", "", response{status: 200, header: jsonHeader,
			raw: []byte(strings.Replace(voucher, `"remaining":null`, `"remaining":null,"price":5`, 1))}},
		"a status not listed": {"GET", "/api/vouchers/7", "", response{status: 204, header: http.Header{}}},
		"an error code not listed": {"GET", "/api/vouchers/7", "", response{status: 404, header: jsonHeader,
			raw: []byte(`{"code":"gone","message":"m"}`)}},
		"an error without Retry-After": {"POST", "/api/vouchers/7/seckill", "", response{status: 429, header: jsonHeader,
			raw: []byte(`{"code":"rate_limited","message":"m"}`)}},
		"the wrong content type": {"GET", "/healthz", "", response{status: 200, header: http.Header{"Content-Type": {"text/plain"}},
			raw: []byte(`ok`)}},
		"a route not listed": {"GET", "/api/nothing", "", response{status: 200, header: jsonHeader, raw: []byte(`{}`)}},
		"a request not listed": {"POST", "/api/auth/code", `{"phone":"+8613800138000","x":1}`, response{status: 200, header: jsonHeader,
			raw: []byte(`{"sent":true,"delivery":"phone"}`)}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			if errs := openAPIErrors(req, []byte(tc.body), tc.res); len(errs) == 0 {
				t.Errorf("%s %s answered %d %s: no error", tc.method, tc.path, tc.res.status, tc.res.raw)
			}
		})
	}
}

// TestOpenAPIRoutes: the document has every route of the route table, and
// no other.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.doc.OpenAPI; got != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", got)
	}
	srv, err := New(Config{}, Services{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var served, documented []string
	for _, rt := range srv.routes {
		served = append(served, rt.pattern)
	}
	for path, item := range spec.doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+muxPath(path))
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("routes served (-) and in openapi.json (+) differ:\n%s", diff)
	}
}

// TestOpenAPIErrorCodes: the document's error codes are the error table's,
// and "internal".
func TestOpenAPIErrorCodes(t *testing.T) {
	t.Parallel()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, c := range spec.doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		documented = append(documented, c.(string))
	}
	codes := []string{"internal"}
	for _, e := range errorCodes {
		if !slices.Contains(codes, e.code) {
			codes = append(codes, e.code)
		}
	}
	slices.Sort(codes)
	slices.Sort(documented)
	if diff := cmp.Diff(codes, documented); diff != "" {
		t.Errorf("error codes of the table (-) and of openapi.json (+) differ:\n%s", diff)
	}
}

// TestOpenAPICurrencies: the document's currencies are the service's
// table (seckill.Currencies).
func TestOpenAPICurrencies(t *testing.T) {
	t.Parallel()
	spec, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, c := range spec.doc.Components.Schemas["Currency"].Value.Enum {
		documented = append(documented, c.(string))
	}
	slices.Sort(documented)
	if diff := cmp.Diff(seckill.Currencies(), documented); diff != "" {
		t.Errorf("currencies of the table (-) and of openapi.json (+) differ:\n%s", diff)
	}
}

// TestOpenAPIServed: the document is served as is, to anyone, as JSON.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	res := e.do("GET", "/api/openapi.json", "", nil)
	if res.status != 200 || res.header.Get("Content-Type") != "application/json" || !bytes.Equal(res.raw, openAPIDoc) {
		t.Errorf("GET /api/openapi.json = %d %q, %d bytes; want 200 application/json with the embedded %d bytes",
			res.status, res.header.Get("Content-Type"), len(res.raw), len(openAPIDoc))
	}
	if !strings.Contains(string(res.raw), `"openapi": "3.1.0"`) {
		t.Errorf("the document served is not OpenAPI 3.1.0")
	}
}
