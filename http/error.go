package http

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/seckill/seckill"
)

// Errors of the HTTP layer itself, beside the domain's.
var (
	errBodyTooLarge     = errors.New("request body too large")
	errRouteNotFound    = errors.New("no such route")
	errMethodNotAllowed = errors.New("method not allowed")
)

// errorCodes is the one table from error to HTTP status and code. The first
// entry that the error wraps wins; an error in no entry is a 500.
var errorCodes = []struct {
	err    error
	status int
	code   string
}{
	{seckill.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
	{seckill.ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{seckill.ErrForbidden, http.StatusForbidden, "forbidden"},
	{seckill.ErrVoucherNotFound, http.StatusNotFound, "voucher_not_found"},
	{seckill.ErrOrderNotFound, http.StatusNotFound, "order_not_found"},
	{seckill.ErrDeadLetterNotFound, http.StatusNotFound, "dead_letter_not_found"},
	{errRouteNotFound, http.StatusNotFound, "not_found"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed"},
	{seckill.ErrSoldOut, http.StatusConflict, "sold_out"},
	{seckill.ErrDuplicateOrder, http.StatusConflict, "duplicate_order"},
	{seckill.ErrNotStarted, http.StatusConflict, "not_started"},
	{seckill.ErrEnded, http.StatusConflict, "ended"},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large"},
	{seckill.ErrRateLimited, http.StatusTooManyRequests, "rate_limited"},
	{seckill.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{seckill.ErrTransient, http.StatusServiceUnavailable, "unavailable"},
}

// errorBody is every error answer: {"code","message"}, and the buyer's order
// id for duplicate_order.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	OrderID int64  `json:"orderId,omitempty,string"`
}

// writeError answers with the status and code of err and returns the
// status. Clients see the client-safe message of an *seckill.Error or the
// sentinel's text, never the details wrapped around it.
func writeError(w http.ResponseWriter, err error) int {
	status, body := http.StatusInternalServerError, errorBody{Code: "internal", Message: "internal error"}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			status, body = e.status, errorBody{Code: e.code, Message: e.err.Error()}
			break
		}
	}
	var de *seckill.Error
	if errors.As(err, &de) && status != http.StatusInternalServerError {
		body.Message = de.Error()
		body.OrderID = de.OrderID
		if de.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(de.RetryAfter.Seconds()))))
		}
	}
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
	return status
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
