package http

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDoc is the OpenAPI 3.1 document of the API. Tests hold it equal to
// the route table and check the handlers' answers against it.
//
//go:embed openapi.json
var openAPIDoc []byte

// serveOpenAPI answers GET /api/openapi.json with the document, to anyone:
// it describes the API, and holds no secret.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openAPIDoc)))
	w.WriteHeader(http.StatusOK)
	w.Write(openAPIDoc)
}
