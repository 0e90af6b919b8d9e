package http

import (
	"net/http"
	"strconv"
)

func (s *Server) sendCode(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Phone string `json:"phone"`
	}
	if err := decodeJSON(r.Body, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.login.SendCode(r.Context(), req.Phone); err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Sent bool `json:"sent"`
	}{Sent: true})
}

func (s *Server) logIn(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Phone string `json:"phone"`
		Code  string `json:"code"`
	}
	if err := decodeJSON(r.Body, &req); err != nil {
		s.error(w, r, err)
		return
	}
	token, u, err := s.login.LogIn(r.Context(), req.Phone, req.Code)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Token  string `json:"token"`
		UserID string `json:"userId"`
	}{Token: token, UserID: strconv.FormatInt(u.ID, 10)})
}
