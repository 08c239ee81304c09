package checkout

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 description of the API (openapi.json in this
// package, embedded in the binary), served at GET /openapi.json. The
// package's tests validate every request and answer they make against it
// and fail when a status or code it lists is never answered. Read-only:
// do not modify the slice.
//
//go:embed openapi.json
var OpenAPI []byte

// routeOpenAPI serves OpenAPI.
const routeOpenAPI = "GET /openapi.json"

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	writeBody(w, http.StatusOK, OpenAPI)
}
