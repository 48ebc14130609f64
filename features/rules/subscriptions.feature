@needs:topics
Feature: Subscription rules select and copy messages
  Every subscription has rules; each rule is a filter and, optionally, an action. The rules of a
  subscription decide which messages it stores and how many copies of each.

  @RULES-RULE-001
  Scenario: A new subscription has the $Default rule, which selects every message unchanged
    Given a topic "t" with subscriptions "s1", "s2"
    When messages "m1", "m2" are sent to "t"
    Then peeking "t/Subscriptions/s1" shows "m1", "m2"
    And peeking "t/Subscriptions/s2" shows "m1", "m2"
    And the rules of "t/Subscriptions/s1" are "$Default"
    And the rule "$Default" of "t/Subscriptions/s1" has the true filter

  @RULES-RULE-003
  Scenario: A subscription without rules receives nothing, and the others still get their copies
    Given a topic "t" with subscriptions "all", "none"
    When rule "$Default" is removed from "t/Subscriptions/none"
    And message "m1" is sent to "t"
    Then the operation succeeds
    And the rules of "t/Subscriptions/none" are none
    And peeking "t/Subscriptions/none" shows nothing
    And peeking "t/Subscriptions/all" shows "m1"

  @RULES-RULE-003
  Scenario: A message no subscription selects is stored nowhere
    Given a topic "t" with subscriptions "red", "blue"
    And "t/Subscriptions/red" has only the rule "red" with SQL filter `color = 'red'`
    And "t/Subscriptions/blue" has only the rule "blue" with SQL filter `color = 'blue'`
    When message "green" with property "color" = "green" is sent to "t"
    And message "red1" with property "color" = "red" is sent to "t"
    Then peeking "t/Subscriptions/red" shows "red1"
    And peeking "t/Subscriptions/blue" shows nothing

  @RULES-RULE-002
  Scenario: Rules without actions are OR-ed into a single copy
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "by-color" with SQL filter `color = 'red'`
    When rule "by-size" with SQL filter `size > 5` is added to "t/Subscriptions/s"
    And rule "by-correlation" with correlation filter correlation id "order" is added to "t/Subscriptions/s"
    And message "both" with correlation id "order" and properties "color" = "red" and "size" = 10 is sent to "t"
    And message "one" with property "size" = 7 is sent to "t"
    And message "neither" with property "size" = 2 is sent to "t"
    Then peeking "t/Subscriptions/s" shows "both", "one"

  @RULES-RULE-004
  Scenario: Rules are added, listed and removed by name
    Given a topic "t" with subscriptions "s"
    When rule "cheap" with SQL filter `price < 10` is added to "t/Subscriptions/s"
    And rule "vip" with correlation filter label "vip" and property "tier" = "gold" is added to "t/Subscriptions/s"
    Then the rules of "t/Subscriptions/s" are "$Default", "cheap", "vip"
    And the rule "cheap" of "t/Subscriptions/s" has SQL filter `price < 10`
    And the rule "vip" of "t/Subscriptions/s" has correlation filter label "vip" and property "tier" = "gold"
    When rule "$Default" is removed from "t/Subscriptions/s"
    Then the rules of "t/Subscriptions/s" are "cheap", "vip"

  @RULES-RULE-004
  Scenario: A rule name is unique in its subscription
    Given a topic "t" with subscriptions "s"
    When rule "r" with SQL filter `a = 1` is added to "t/Subscriptions/s"
    And rule "r" with SQL filter `a = 2` is added to "t/Subscriptions/s"
    Then the operation fails with "entity-already-exists"
    And the rule "r" of "t/Subscriptions/s" has SQL filter `a = 1`

  @RULES-RULE-004
  Scenario: Removing a rule that does not exist fails
    Given a topic "t" with subscriptions "s"
    When rule "nope" is removed from "t/Subscriptions/s"
    Then the operation fails with "entity-not-found"
    And the rules of "t/Subscriptions/s" are "$Default"

  @RULES-RULE-005
  Scenario: Rules decide on arrival; changing them leaves stored messages alone
    Given a topic "t" with subscriptions "s"
    When message "before" with property "color" = "blue" is sent to "t"
    And rule "$Default" is removed from "t/Subscriptions/s"
    And rule "red" with SQL filter `color = 'red'` is added to "t/Subscriptions/s"
    And message "after-blue" with property "color" = "blue" is sent to "t"
    And message "after-red" with property "color" = "red" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "before", "after-red"

  @RULES-BOOL-001
  Scenario: The true filter selects everything, the false filter nothing
    Given a topic "t" with subscriptions "yes", "no"
    And "t/Subscriptions/yes" has only the rule "all" with the true filter
    And "t/Subscriptions/no" has only the rule "none" with the false filter
    When messages "m1", "m2" are sent to "t"
    Then peeking "t/Subscriptions/yes" shows "m1", "m2"
    And peeking "t/Subscriptions/no" shows nothing
    And the rule "none" of "t/Subscriptions/no" has the false filter
