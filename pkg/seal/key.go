package seal

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
)

// KeyField is the field of the digest key Secret that holds the key.
const KeyField = "key"

// LoadOrCreateKey reads the digest key from Secret name, creating it with a
// random key when absent. When two replicas race to create it, the loser
// reads the winner's. A new key changes every digest: each Secret is
// encrypted afresh once, the next time it is read.
func LoadOrCreateKey(ctx context.Context, secrets corev1client.SecretInterface, name string) ([]byte, error) {
	for range 3 {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if k := s.Data[KeyField]; len(k) >= 16 {
				return k, nil
			}
			return nil, fmt.Errorf("digest key Secret %s: field %q holds fewer than 16 bytes (delete the Secret to have a new key made)", name, KeyField)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading digest key Secret %s: %w", name, err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "reverser"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{KeyField: key},
		}, metav1.CreateOptions{})
		if err == nil {
			klog.InfoS("Created the Secret digest key", "secret", name)
			return key, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating digest key Secret %s: %w", name, err)
		}
	}
	return nil, fmt.Errorf("digest key Secret %s: created and deleted again while reading it", name)
}
