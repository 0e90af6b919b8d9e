package http

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/seckill"
)

// Errors of the HTTP layer itself, beside the domain's.
var (
	errBodyTooLarge     = errors.New("request body too large")
	errRouteNotFound    = errors.New("no such route")
	errMethodNotAllowed = errors.New("method not allowed")
)

// errorCode is an entry of the error table: an error and its answer.
type errorCode struct {
	err    error
	status int
	code   string
	// message, if set, is the client's message instead of err's text.
	message string
}

// errorCodes is the one table from error to HTTP status and code. The first
// entry that the error wraps wins; an error in no entry is a 500.
var errorCodes = []errorCode{
	{seckill.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument", ""},
	{seckill.ErrUnauthorized, http.StatusUnauthorized, "unauthorized", ""},
	{seckill.ErrForbidden, http.StatusForbidden, "forbidden", ""},
	{seckill.ErrVoucherNotFound, http.StatusNotFound, "voucher_not_found", ""},
	{seckill.ErrOrderNotFound, http.StatusNotFound, "order_not_found", ""},
	{seckill.ErrDeadLetterNotFound, http.StatusNotFound, "dead_letter_not_found", ""},
	{errRouteNotFound, http.StatusNotFound, "not_found", ""},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed", ""},
	{seckill.ErrSoldOut, http.StatusConflict, "sold_out", ""},
	{seckill.ErrDuplicateOrder, http.StatusConflict, "duplicate_order", ""},
	{seckill.ErrOrderPending, http.StatusConflict, "order_pending", ""},
	{seckill.ErrOrderPaid, http.StatusConflict, "order_paid", ""},
	{seckill.ErrOrderCancelled, http.StatusConflict, "order_cancelled", ""},
	{seckill.ErrOrderFailed, http.StatusConflict, "order_failed", ""},
	{seckill.ErrNoDeadline, http.StatusConflict, "no_payment_deadline", ""},
	{seckill.ErrBadSignature, http.StatusUnauthorized, "bad_signature", ""},
	{seckill.ErrChallengeRequired, http.StatusForbidden, "challenge_required", ""},
	{seckill.ErrChallengeInvalid, http.StatusForbidden, "challenge_invalid", ""},
	{seckill.ErrChallengeNotNeeded, http.StatusConflict, "challenge_not_needed", ""},
	{seckill.ErrNotStarted, http.StatusConflict, "not_started", ""},
	{seckill.ErrEnded, http.StatusConflict, "ended", ""},
	{seckill.ErrPaused, http.StatusConflict, "paused", ""},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large", ""},
	{seckill.ErrRateLimited, http.StatusTooManyRequests, "rate_limited", ""},
	{seckill.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", ""},
	{seckill.ErrTransient, http.StatusServiceUnavailable, "unavailable", ""},
	// The request's time (Config.RequestTimeout) ran out in a store or a
	// provider that passed the context's error on as it is: the service
	// is too slow right now, and the client may ask again (a pay or cancel
	// that did commit answers the same).
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable", "the request took too long; try again"},
}

// clientClosed is the answer to a request whose client went away while it
// was served (its context cancelled): 499, as nginx records it, since no
// client reads it.
var clientClosed = &errorCode{context.Canceled, 499, "client_closed_request", "the client closed the request"}

// internalError is the answer to an error in no entry of the table.
var internalError = &errorCode{nil, http.StatusInternalServerError, "internal", ""}

// kindCodes maps each sentinel of the table to its entry, for the errors
// most answers carry: an *seckill.Error whose Kind is the sentinel itself,
// which wraps nothing else, so that its entry is the first it wraps.
var kindCodes = func() map[error]*errorCode {
	m := make(map[error]*errorCode, len(errorCodes))
	for i := range errorCodes {
		if _, dup := m[errorCodes[i].err]; !dup {
			m[errorCodes[i].err] = &errorCodes[i]
		}
	}
	return m
}()

// lookupError returns the entry of the table for err; internalError for
// an error in none.
func lookupError(err error) *errorCode {
	if de, ok := err.(*seckill.Error); ok {
		if e := kindCodes[de.Kind]; e != nil {
			return e
		}
	}
	for i := range errorCodes {
		if errors.Is(err, errorCodes[i].err) {
			return &errorCodes[i]
		}
	}
	return internalError
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
	return writeErrorCode(w, err, lookupError(err))
}

// writeErrorCode is writeError with err's entry of the table, e, looked up
// already.
func writeErrorCode(w http.ResponseWriter, err error, e *errorCode) int {
	body := errorBody{Code: e.code, Message: "internal error"}
	if e != internalError {
		body.Message = e.err.Error()
		if e.message != "" {
			body.Message = e.message
		}
		de, ok := err.(*seckill.Error)
		if !ok {
			de = asError(err)
			ok = de != nil
		}
		if ok {
			body.Message = de.Error()
			body.OrderID = de.OrderID
			if de.RetryAfter > 0 {
				if de.RetryAfter <= time.Second {
					w.Header()["Retry-After"] = retryAfterOne
				} else {
					w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(de.RetryAfter.Seconds()))))
				}
			}
		}
	}
	h := w.Header()
	if v := h["Retry-After"]; e.status == http.StatusServiceUnavailable && (len(v) == 0 || v[0] == "") {
		h["Retry-After"] = retryAfterOne
	}
	buf := bodyBuffers.Get().(*[]byte)
	b := appendErrorBody((*buf)[:0], &body)
	h["Content-Type"] = contentTypeJSON
	w.WriteHeader(e.status)
	w.Write(b)
	*buf = b
	bodyBuffers.Put(buf)
	return e.status
}

// asError returns the *seckill.Error that err wraps, or nil. (Apart, so
// that writeErrorCode's direct *seckill.Error does not escape.)
func asError(err error) *seckill.Error {
	var de *seckill.Error
	if errors.As(err, &de) {
		return de
	}
	return nil
}

// expected reports whether err is an answer the service marks as given in
// the ordinary course of a sale (seckill.Error.Expected), not a failure.
func expected(err error) bool {
	de, ok := err.(*seckill.Error)
	if !ok {
		de = asError(err)
	}
	return de != nil && de.Expected
}

// bodyBuffers hold the bytes of answers written by hand.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// appendErrorBody appends body as encoding/json writes it (writeJSON), by
// hand: an error is most of a flash sale's answers.
func appendErrorBody(b []byte, body *errorBody) []byte {
	b = append(b, `{"code":`...)
	b = appendJSONString(b, body.Code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, body.Message)
	if body.OrderID != 0 {
		b = append(b, `,"orderId":"`...)
		b = strconv.AppendInt(b, body.OrderID, 10)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string, as encoding/json writes it
// (HTML characters escaped): printable ASCII by hand, anything else through
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jsonPlain holds the bytes encoding/json writes as they are: printable
// ASCII but for the quote, the backslash and the HTML characters.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
