//! Maps the domain's keys, states and modes to TEXT columns on both backends.
//!
//! Each type is stored as the same string it has on the wire (`as_str`), and
//! read back through its `parse`, so a value the type does not know fails the
//! read with the column's value named instead of being carried on as a string.

/// Implements diesel's `ToSql<Text>`/`FromSql<Text>` for a type with
/// `fn as_str(&self) -> &str` and `fn parse(&str) -> Result<Self, E: Display>`.
/// The type must also derive `diesel::AsExpression` and `diesel::FromSqlRow`
/// with `#[diesel(sql_type = diesel::sql_types::Text)]`.
macro_rules! text_column {
    ($ty:ty) => {
        impl<DB> diesel::serialize::ToSql<diesel::sql_types::Text, DB> for $ty
        where
            DB: diesel::backend::Backend,
            str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, DB>,
            ) -> diesel::serialize::Result {
                <str as diesel::serialize::ToSql<diesel::sql_types::Text, DB>>::to_sql(
                    self.as_str(),
                    out,
                )
            }
        }

        impl<DB> diesel::deserialize::FromSql<diesel::sql_types::Text, DB> for $ty
        where
            DB: diesel::backend::Backend,
            String: diesel::deserialize::FromSql<diesel::sql_types::Text, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
                let text = <String as diesel::deserialize::FromSql<
                                                                            diesel::sql_types::Text,
                                                                            DB,
                                                                        >>::from_sql(bytes)?;
                <$ty>::parse(&text).map_err(|e| {
                    format!(
                        "the store holds {text:?}, which is not a valid {}: {e}",
                        stringify!($ty)
                    )
                    .into()
                })
            }
        }
    };
}

pub(crate) use text_column;
