package auditrelay

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

const batch = `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"level":"RequestResponse","auditID":"a1","stage":"ResponseComplete",
"requestURI":"/api/v1/namespaces/n/configmaps/c","verb":"patch","user":{"username":"alice"},
"objectRef":{"resource":"configmaps","namespace":"n","name":"c","apiVersion":"v1"},
"responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","resourceVersion":"42"}},
"requestReceivedTimestamp":"2026-12-06T10:00:00.000000Z","stageTimestamp":"2026-12-06T10:00:00.500000Z"}]}`

// TestTheRelayMovesTimestampsByTheSkewAndKeepsTheRest: with "1h" in the
// control file, the upstream gets the batch an hour later in time, with the
// same path, headers and response object; without it, the batch as sent.
func TestTheRelayMovesTimestampsByTheSkewAndKeepsTheRest(t *testing.T) {
	var got []byte
	var auth, path string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		auth, path = r.Header.Get("Authorization"), r.URL.Path
		w.WriteHeader(http.StatusAccepted)
	}))
	defer upstream.Close()
	control := filepath.Join(t.TempDir(), "skew")
	relay := httptest.NewServer(&Relay{Upstream: upstream.URL, Client: upstream.Client(), Control: control})
	defer relay.Close()
	post := func() int {
		req, err := http.NewRequest(http.MethodPost, relay.URL+"/audit/local", strings.NewReader(batch))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer token")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	assert.Equal(t, http.StatusAccepted, post())
	assert.JSONEq(t, batch, string(got), "no skew: the batch as sent")

	require.NoError(t, os.WriteFile(control, []byte("1h"), 0o644))
	assert.Equal(t, http.StatusAccepted, post())
	assert.Equal(t, "Bearer token", auth)
	assert.Equal(t, "/audit/local", path)
	var list auditv1.EventList
	require.NoError(t, json.Unmarshal(got, &list))
	require.Len(t, list.Items, 1)
	e := list.Items[0]
	assert.Equal(t, time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC), e.RequestReceivedTimestamp.UTC())
	assert.Equal(t, time.Date(2026, 12, 6, 11, 0, 0, 500000000, time.UTC), e.StageTimestamp.UTC())
	assert.JSONEq(t, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","resourceVersion":"42"}}`, string(e.ResponseObject.Raw))
	assert.Equal(t, "alice", e.User.Username)
}
