//! [`ServerBuilder::on`]: one generic registration for every inbound method that has a
//! handler slot, keyed by the typed [`Method`] instead of a method-name string.

use std::future::Future;
use std::sync::Arc;

use super::builder::ServerBuilder;
use super::{erase, Handler, HandlerResult, Session};
use crate::protocol::channels::{
    ChannelsAcknowledge, ChannelsClose, ChannelsList, ChannelsOpen, ChannelsPublish, ChannelsTyping,
};
use crate::protocol::state::StateRollback;
use crate::protocol::{EmptyObject, Method};

mod sealed {
    pub trait Sealed {}
}

/// A host → server method a [`ServerBuilder::on`] handler can serve. Implemented for each
/// method with a handler slot (`channels/open`, `channels/close`, `channels/publish`,
/// `channels/list`, `channels/acknowledge`, `channels/typing`, `state/rollback`); a method
/// without one does not compile, so a handler can never be bound to a name nobody calls.
pub trait OnMethod: Method + sealed::Sealed {
    /// Puts `handler` in this method's slot of `builder` (a second one is refused by
    /// [`ServerBuilder::build`], as for the named registration).
    #[doc(hidden)]
    fn install(builder: &mut ServerBuilder, handler: Handler<Self::Params, Self::Result>);
}

macro_rules! same_shape {
    ($($m:ty => $slot:ident, $name:literal;)*) => {$(
        impl sealed::Sealed for $m {}
        impl OnMethod for $m {
            fn install(builder: &mut ServerBuilder, handler: Handler<Self::Params, Self::Result>) {
                builder.fill_slot(|h| &mut h.$slot, handler, $name);
            }
        }
    )*};
}

same_shape! {
    ChannelsOpen => channels_open, "on_channels_open";
    ChannelsClose => channels_close, "on_channels_close";
    ChannelsPublish => channels_publish, "on_channels_publish";
    StateRollback => rollback, "on_rollback";
}

impl sealed::Sealed for ChannelsList {}
impl OnMethod for ChannelsList {
    fn install(builder: &mut ServerBuilder, handler: Handler<EmptyObject, Self::Result>) {
        let h: Handler<(), Self::Result> =
            Arc::new(move |s, ()| handler(s, EmptyObject::default()));
        builder.fill_slot(|h| &mut h.channels_list, h, "on_channels_list");
    }
}

/// `channels/acknowledge` and `channels/typing` answer a Request with an empty object; the
/// slot's handler returns `()`.
macro_rules! empty_answer {
    ($($m:ty => $slot:ident, $name:literal;)*) => {$(
        impl sealed::Sealed for $m {}
        impl OnMethod for $m {
            fn install(builder: &mut ServerBuilder, handler: Handler<Self::Params, EmptyObject>) {
                let h: Handler<Self::Params, ()> = Arc::new(move |s, p| {
                    let fut = handler(s, p);
                    Box::pin(async move { fut.await.map(|_| ()) })
                });
                builder.fill_slot(|h| &mut h.$slot, h, $name);
            }
        }
    )*};
}

empty_answer! {
    ChannelsAcknowledge => channels_acknowledge, "on_channels_acknowledge";
    ChannelsTyping => channels_typing, "on_channels_typing";
}

impl ServerBuilder {
    /// Handles the inbound method `M` with `handler`, the generic form of the named
    /// registrations (`on::<ChannelsOpen>(h)` is `on_channels_open(h)`; both fill the same
    /// slot, so registering both is a [`super::BuildError::DuplicateRegistration`]). The
    /// capability `M` requires is checked before the handler runs, as for every method.
    pub fn on<M, F, Fut>(mut self, handler: F) -> Self
    where
        M: OnMethod,
        F: Fn(Session, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<M::Result>> + Send + 'static,
    {
        M::install(&mut self, erase(handler));
        self
    }
}
