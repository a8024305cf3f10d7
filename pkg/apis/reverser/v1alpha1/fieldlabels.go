package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// CommitRequestGitTargetNameField is the field selector that lists the
// CommitRequests of one GitTarget.
const CommitRequestGitTargetNameField = "spec.gitTargetRef.name"

// addFieldLabelConversions declares which field selectors each kind accepts,
// so a client asking for an unsupported field gets a clear 400 instead of an
// empty list.
func addFieldLabelConversions(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("CommitRequest"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", "metadata.namespace", CommitRequestGitTargetNameField:
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label not supported for CommitRequest: %s", label)
			}
		})
}
