// Package admit holds our API server's admission plugins, which refuse at
// create (or spec change) what the controller would otherwise accept and
// fail later: reverser.dev/Save (verb save on the GitTarget, and its
// grants), reverser.dev/Rules (the writer may list and watch what a rule
// selects), reverser.dev/Claims (get and patch on the applier object) and
// reverser.dev/Credentials (get on each Secret a GitProvider names). The
// policies themselves live in package tenancy, which the controller's
// re-checks share. Plugins hold no lock and block only on
// SubjectAccessReviews and reads of our own storage.
package admit
