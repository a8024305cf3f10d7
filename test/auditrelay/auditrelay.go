// Package auditrelay relays kube-apiserver's audit webhook batches to
// Reverser's audit ingress, moving every event's timestamps by the skew its
// control file names: what a kube-apiserver whose clock runs ahead of or
// behind the controller's would send. The fault suite puts one between the
// two.
package auditrelay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// maxBatch bounds a batch read into memory.
const maxBatch = 64 << 20

// Relay forwards each request to Upstream (scheme and host) on the same
// path, with its headers and its events' timestamps moved by the skew.
type Relay struct {
	Upstream string
	Client   *http.Client
	// Control is the file naming the skew, a Go duration ("1h", "-1h");
	// absent or empty, none.
	Control string
}

// Skew reads the control file.
func (r *Relay) Skew() (time.Duration, error) {
	data, err := os.ReadFile(r.Control)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if s := strings.TrimSpace(string(data)); s != "" {
		return time.ParseDuration(s)
	}
	return 0, nil
}

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBatch))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	skew, err := r.Skew()
	if err != nil {
		http.Error(w, "reading the skew: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if skew != 0 {
		if body, err = Shift(body, skew); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, r.Upstream+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.Header = req.Header.Clone()
	out.Header.Del("Content-Length")
	resp, err := r.Client.Do(out)
	if err != nil {
		http.Error(w, "relaying: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Shift moves the request-received and stage timestamps of every event of
// an audit.k8s.io/v1 EventList by d.
func Shift(body []byte, d time.Duration) ([]byte, error) {
	var list auditv1.EventList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decoding the audit batch: %w", err)
	}
	for i := range list.Items {
		e := &list.Items[i]
		e.RequestReceivedTimestamp = metav1.NewMicroTime(e.RequestReceivedTimestamp.Add(d))
		e.StageTimestamp = metav1.NewMicroTime(e.StageTimestamp.Add(d))
	}
	return json.Marshal(&list)
}
