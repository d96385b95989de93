package main

// A stand-in for `argocd admin redis-initial-password`, the command of the argo-cd chart's
// redis-secret-init Job (a Helm pre-install/pre-upgrade hook): Argo CD's own is in its CLI's
// admin package, which would link the CLI and its SCM and notification clients into this build
// (tools/argocd/servers links only the servers). It does what that command does: in the pod's
// namespace, create Secret argocd-redis with key `auth`, a random 16-character password, unless
// the Secret exists; with the pod's ServiceAccount token (in-cluster configuration).

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func redisInitialPassword() error {
	raw, err := os.ReadFile(namespaceFile)
	if err != nil {
		return fmt.Errorf("the pod's namespace: %w", err)
	}
	namespace := strings.TrimSpace(string(raw))
	fmt.Printf("Checking for initial Redis password in secret %s/argocd-redis at key auth.\n", namespace)
	config, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	const letters = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-"
	password := make([]byte, 16)
	for i := range password {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(letters))))
		if err != nil {
			return err
		}
		password[i] = letters[n.Int64()]
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-redis", Namespace: namespace},
		Data:       map[string][]byte{"auth": password},
		Type:       corev1.SecretTypeOpaque,
	}
	_, err = client.CoreV1().Secrets(namespace).Create(context.Background(), secret, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	fmt.Println("Argo CD Redis secret state confirmed: secret name argocd-redis.")
	return nil
}
