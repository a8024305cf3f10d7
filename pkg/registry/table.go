package registry

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Column is one printed column beyond NAME and AGE.
type Column[T Object] struct {
	Name        string
	Type        string // "string", "integer", "date"
	Description string
	// Priority 1 shows only with -o wide.
	Priority int32
	Value    func(obj T) any
}

// TableSpec lists a kind's columns. NAME comes first and AGE last.
type TableSpec[T Object] struct {
	Columns []Column[T]
}

type tableConvertor[T Object] struct {
	spec       TableSpec[T]
	definition []metav1.TableColumnDefinition
}

func newTableConvertor[T Object](spec TableSpec[T]) *tableConvertor[T] {
	defs := []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name", Description: "Name of the object."}}
	for _, c := range spec.Columns {
		defs = append(defs, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Description: c.Description, Priority: c.Priority})
	}
	defs = append(defs, metav1.TableColumnDefinition{Name: "Age", Type: "date", Description: "Time since creation."})
	return &tableConvertor[T]{spec: spec, definition: defs}
}

func (t *tableConvertor[T]) ConvertToTable(_ context.Context, object runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if o, ok := opts.(*metav1.TableOptions); !ok || !o.NoHeaders {
		table.ColumnDefinitions = t.definition
	}
	row := func(obj runtime.Object) error {
		o, ok := obj.(T)
		if !ok {
			return fmt.Errorf("cannot print %T", obj)
		}
		cells := []any{o.GetName()}
		for _, c := range t.spec.Columns {
			cells = append(cells, c.Value(o))
		}
		cells = append(cells, age(o.GetCreationTimestamp()))
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	if meta.IsListType(object) {
		if err := meta.EachListItem(object, row); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(object); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
		return table, nil
	}
	if err := row(object); err != nil {
		return nil, err
	}
	if a, err := meta.Accessor(object); err == nil {
		table.ResourceVersion = a.GetResourceVersion()
	}
	return table, nil
}

func age(ts metav1.Time) string {
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}

// ConditionStatus prints a condition's status, or "" when it is absent.
func ConditionStatus(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status)
	}
	return ""
}

// ConditionReason prints a condition's reason, or "" when it is absent.
func ConditionReason(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Reason
	}
	return ""
}

// ShortSHA prints the first seven characters of a commit id.
func ShortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// ReadyColumn shows the status of the Ready condition.
func ReadyColumn[T Object](description string) Column[T] {
	return Column[T]{Name: "Ready", Type: "string", Description: description, Value: func(o T) any {
		return ConditionStatus(Conditions(o), "Ready")
	}}
}

// ReasonColumn shows the reason of the Ready condition, with -o wide.
func ReasonColumn[T Object]() Column[T] {
	return Column[T]{Name: "Reason", Type: "string", Priority: 1, Description: "Reason of the Ready condition.", Value: func(o T) any {
		return ConditionReason(Conditions(o), "Ready")
	}}
}
