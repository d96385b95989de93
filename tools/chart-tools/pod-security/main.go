// Command pod-security evaluates pod templates against a Pod Security Standards level with the
// upstream evaluator (k8s.io/pod-security-admission/policy), the code the API server's
// PodSecurity admission runs.
//
// It reads Kubernetes objects from stdin (YAML documents separated by `---`, or JSON; a `List`
// is expanded), evaluates the pod spec of every Pod, Deployment, StatefulSet, DaemonSet,
// ReplicaSet, ReplicationController, Job, CronJob and PodTemplate, skips every other kind, and
// prints one JSON array: for each evaluated object its document index, kind, namespace, name,
// whether the level allows it, and each forbidden check's reason and detail.
//
//	pod-security [-level restricted] [-version latest] < objects.yaml
//
// Exit codes: 0 evaluated (allowed or not: read `allowed`), 2 bad arguments or unreadable input.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

type violation struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

type result struct {
	Index     int         `json:"index"`
	Kind      string      `json:"kind"`
	Namespace string      `json:"namespace,omitempty"`
	Name      string      `json:"name"`
	Allowed   bool        `json:"allowed"`
	Forbidden []violation `json:"forbidden"`
}

type header struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

// podSpecOf decodes a workload and returns the pod metadata and spec PodSecurity admission
// evaluates for it (the template's, or the Pod's own); ok is false for kinds without one.
func podSpecOf(kind string, doc []byte) (meta *metav1.ObjectMeta, spec *corev1.PodSpec, ok bool, err error) {
	decode := func(into any) error { return yaml.Unmarshal(doc, into) }
	switch kind {
	case "Pod":
		var o corev1.Pod
		err = decode(&o)
		return &o.ObjectMeta, &o.Spec, true, err
	case "PodTemplate":
		var o corev1.PodTemplate
		err = decode(&o)
		return &o.Template.ObjectMeta, &o.Template.Spec, true, err
	case "ReplicationController":
		var o corev1.ReplicationController
		err = decode(&o)
		if o.Spec.Template == nil {
			return &metav1.ObjectMeta{}, &corev1.PodSpec{}, true, err
		}
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, true, err
	case "Deployment":
		var o appsv1.Deployment
		err = decode(&o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, true, err
	case "StatefulSet":
		var o appsv1.StatefulSet
		err = decode(&o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, true, err
	case "DaemonSet":
		var o appsv1.DaemonSet
		err = decode(&o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, true, err
	case "ReplicaSet":
		var o appsv1.ReplicaSet
		err = decode(&o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, true, err
	case "Job":
		var o batchv1.Job
		err = decode(&o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, true, err
	case "CronJob":
		var o batchv1.CronJob
		err = decode(&o)
		return &o.Spec.JobTemplate.Spec.Template.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec, true, err
	}
	return nil, nil, false, nil
}

func main() {
	level := flag.String("level", "restricted", "Pod Security level: privileged, baseline or restricted")
	version := flag.String("version", "latest", "policy version: latest or v1.N")
	flag.Parse()
	lvl, err := api.ParseLevel(*level)
	if err != nil {
		fail(err)
	}
	ver, err := api.ParseVersion(*version)
	if err != nil {
		fail(err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil) // nil: no emulated older minor
	if err != nil {
		fail(err)
	}
	lv := api.LevelVersion{Level: lvl, Version: ver}

	results := []result{}
	var evaluate func(index int, doc []byte) error
	evaluate = func(index int, doc []byte) error {
		var h header
		if err := yaml.Unmarshal(doc, &h); err != nil {
			return fmt.Errorf("document %d: %w", index, err)
		}
		if h.Kind == "List" || (len(h.Items) > 0 && len(h.Kind) > 4 && h.Kind[len(h.Kind)-4:] == "List") {
			for _, item := range h.Items {
				if err := evaluate(index, item); err != nil {
					return err
				}
			}
			return nil
		}
		meta, spec, ok, err := podSpecOf(h.Kind, doc)
		if err != nil {
			return fmt.Errorf("document %d (%s %s): %w", index, h.Kind, h.Metadata.Name, err)
		}
		if !ok {
			return nil
		}
		r := result{Index: index, Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name, Allowed: true, Forbidden: []violation{}}
		for _, check := range evaluator.EvaluatePod(lv, meta, spec) {
			if !check.Allowed {
				r.Allowed = false
				r.Forbidden = append(r.Forbidden, violation{Reason: check.ForbiddenReason, Detail: check.ForbiddenDetail})
			}
		}
		results = append(results, r)
		return nil
	}

	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	for index := 0; ; index++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail(fmt.Errorf("reading document %d: %w", index, err))
		}
		if len(doc) == 0 || string(doc) == "null" {
			continue
		}
		if err := evaluate(index, doc); err != nil {
			fail(err)
		}
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(results); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "pod-security: %v\n", err)
	os.Exit(2)
}
