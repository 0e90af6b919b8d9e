package http

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/seckill/seckill"
)

// decodeJSON reads one JSON object from body into v, strictly: unknown
// fields, trailing data and wrong types are ErrInvalidArgument with a
// message that says where, and a body over its size limit (see
// http.MaxBytesReader) is errBodyTooLarge.
func decodeJSON(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return decodeError(err)
		}
		return seckill.Errorf(seckill.ErrInvalidArgument, "request body must hold a single JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var (
		maxBytes *http.MaxBytesError
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxBytes):
		return &seckill.Error{Kind: errBodyTooLarge, Message: fmt.Sprintf("request body is larger than %d bytes", maxBytes.Limit)}
	case errors.Is(err, io.EOF):
		return seckill.Errorf(seckill.ErrInvalidArgument, "request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return seckill.Errorf(seckill.ErrInvalidArgument, "request body is truncated JSON")
	case errors.As(err, &syntax):
		return seckill.Errorf(seckill.ErrInvalidArgument, "request body is malformed JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return seckill.Errorf(seckill.ErrInvalidArgument, "request body must be a JSON object, not %s", typ.Value)
		}
		return seckill.Errorf(seckill.ErrInvalidArgument, "%s: must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return seckill.Errorf(seckill.ErrInvalidArgument, "%s: unknown field", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return seckill.Errorf(seckill.ErrInvalidArgument, "request body is not valid JSON")
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	}
	return "a " + kind
}

// parseID reads a positive decimal int64 id from a path segment.
func parseID(name, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
		return 0, seckill.Errorf(seckill.ErrInvalidArgument, "%s: must be a positive decimal integer, got %q", name, truncate(s, 40))
	}
	return id, nil
}

// truncate keeps messages that echo client input short.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
