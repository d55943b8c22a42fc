//! Channel registration, changes and incoming messages (§14.5), decided by the core
//! [`ChannelTable`] (the rule `HostState` and `mcpl check` use too).

use super::*;

impl HostSession {
    pub(super) fn on_register(
        &self,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        let mut diags = Vec::new();
        let r = self.inner.state().channels.register(
            &mut diags,
            params,
            notification,
            judged,
            &self.inner.channel_limits,
        );
        self.report(diags);
        r
    }

    /// `channels/changed` (§14.5), by [`ChannelTable::changed`]; the `channels` surface
    /// change is reported on the event stream (§17.7).
    pub(super) fn on_changed(
        &self,
        params: Option<&Value>,
        notification: bool,
        judged: &Grant,
    ) -> Result<Value, ErrorObject> {
        let mut diags = Vec::new();
        let (r, receipt) = {
            let mut st = self.inner.state();
            let r = st.channels.changed(
                &mut diags,
                params,
                notification,
                judged,
                &self.inner.channel_limits,
            );
            let receipt = r
                .is_ok()
                .then(|| {
                    st.review
                        .as_mut()
                        .and_then(|r| r.surface_changed("channels"))
                })
                .flatten();
            (r, receipt)
        };
        self.report(diags);
        if let Some(receipt) = receipt {
            self.inner
                .event_or_report(HostEvent::ManifestChange(receipt));
        }
        r
    }

    /// `channels/incoming` (§14.5), by [`ChannelTable::incoming`] under the grant in force.
    pub(super) fn on_incoming(&self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let label = self.label();
        let mut diags = Vec::new();
        let r = {
            let st = self.inner.state();
            st.channels.incoming(
                &mut diags,
                params,
                &st.grant,
                &self.inner.channel_limits,
                st.review.as_ref(),
                &label,
                |e| self.inner.event(e),
            )
        };
        self.report(diags);
        r
    }
}
